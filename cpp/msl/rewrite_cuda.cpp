// The MSL rewriter's CUDA mode, its generated part: the extern "C" __global__ entry of each kernel (the launch
// contract of cpp/cuda/kernels.h), the sizes of by-value parameter structs, line markers NVRTC reads.
#include <algorithm>
#include <cstdlib>

#include "msl/rewrite_impl.h"

namespace ember::metal::emu::rw {
namespace {

// sizeof / alignof of MSL's scalar and vector types (a 3-vector is laid out as a 4-vector).
bool builtin_layout(const std::string& t, uint32_t* size, uint32_t* align) {
  static const std::map<std::string, uint32_t> scalars = {
      {"bool", 1},  {"char", 1},  {"uchar", 1}, {"int8_t", 1},   {"uint8_t", 1},  {"short", 2},  {"ushort", 2},
      {"half", 2},  {"bfloat", 2}, {"int16_t", 2}, {"uint16_t", 2}, {"int", 4},   {"uint", 4},   {"float", 4}, {"double", 8},
      {"int32_t", 4}, {"uint32_t", 4}, {"unsigned", 4}, {"long", 8}, {"ulong", 8}, {"int64_t", 8}, {"uint64_t", 8},
      {"unsigned int", 4}, {"unsigned long", 8}, {"size_t", 8}};
  if (auto it = scalars.find(t); it != scalars.end()) {
    *size = *align = it->second;
    return true;
  }
  const char last = t.empty() ? 0 : t.back();
  if (last >= '2' && last <= '4') {
    auto it = scalars.find(t.substr(0, t.size() - 1));
    if (it == scalars.end()) return false;
    const uint32_t n = last == '3' ? 4 : last - '0';
    *size = *align = it->second * n;
    return true;
  }
  return false;
}

}  // namespace

// The float64 variant of a kernel file (Metal has no double; CUDA does): every `float` (and floatN) becomes double,
// float literals lose their f, and "float32" in kernel names becomes "float64" (host_name strings, and plain
// kernels named ..._float32). Only the kernels whose names then say float64 get entries (cuda_wrappers), so the
// float32 instantiation of each family, retyped, is its float64 one: it computes and accumulates in double. The
// file is preprocessed with EMBER_CUDA_F64=1 for the few lines that must differ (bit patterns, float-only fits).
void Rewriter::cuda_f64_retype(std::vector<Tok>& raw) {
  auto rename = [](std::string& s) {
    for (size_t at = s.find("float32"); at != std::string::npos; at = s.find("float32", at + 7)) s.replace(at, 7, "float64");
  };
  for (Tok& tk : raw) {
    std::string& s = tk.text;
    if (tk.kind == Tk::Ident) {
      if (s == "float") s = "double";
      else if (s == "float2" || s == "float3" || s == "float4") s = "double" + s.substr(5);
      else rename(s);
    } else if (tk.kind == Tk::Str) {
      rename(s);
    } else if (tk.kind == Tk::Number && s.size() > 1 && s[1] != 'x' && s[1] != 'X' &&
               s.find_first_of(".eE") != std::string::npos && (s.back() == 'f' || s.back() == 'F')) {
      s.pop_back();
    }
  }
}

// Records `struct Name { fields };` layouts and `constexpr` integer constants at namespace scope, so a kernel's
// by-value parameter gets its size in the launch contract (and a static_assert in the text checks it).
void Rewriter::cuda_structs() {
  int depth = 0;
  for (int k = 0; k < (int)sig_.size(); ++k) {
    const std::string& s = t(k);
    if (s == "{") ++depth;
    if (s == "}") --depth;
    if (depth != 0) continue;
    if (s == "constexpr" && kind(k + 2) == Tk::Ident && t(k + 3) == "=" && kind(k + 4) == Tk::Number &&
        t(k + 5) == ";")
      int_consts_[t(k + 2)] = std::strtol(t(k + 4).c_str(), nullptr, 0);
    if (s != "struct" || kind(k + 1) != Tk::Ident || t(k + 2) != "{" || t(k - 1) == ">") continue;
    const std::string name = t(k + 1);
    const int close = match(k + 2, "{", "}");
    uint32_t size = 0, align = 1;
    bool known = true;
    int a = k + 3;
    for (int m = k + 3; m < close && known; ++m) {
      if (t(m) == "{") {  // a member function's body: the statement is not a field
        m = match(m, "{", "}");
        a = m + 1;
        continue;
      }
      if (t(m) != ";") continue;
      // a field statement [a, m): type declarator (, declarator)*
      bool skip = false;
      for (int q = a; q < m; ++q)
        skip = skip || t(q) == "(" || t(q) == "static" || t(q) == "typedef" || t(q) == "using" || t(q) == "template";
      if (!skip && m > a) {
        int first = a;  // the first declarator's name: the last identifier before '[' ',' or the end
        for (int q = a; q < m && t(q) != "[" && t(q) != ","; ++q)
          if (kind(q) == Tk::Ident) first = q;
        std::string type;
        for (int q = a; q < first; ++q)
          if (t(q) != "const") type += (type.empty() ? "" : " ") + t(q);
        uint32_t fs = 0, fa = 0;
        if (!builtin_layout(type, &fs, &fa)) {
          auto it = struct_layout_.find(type);
          if (it == struct_layout_.end()) known = false;
          else fs = it->second.first, fa = it->second.second;
        }
        for (int q = first; known && q < m;) {  // each declarator: name [N]...
          uint64_t count = 1;
          int r = q + 1;
          while (r < m && t(r) == "[") {
            const std::string& n = t(r + 1);
            long v = -1;
            if (kind(r + 1) == Tk::Number) v = std::strtol(n.c_str(), nullptr, 0);
            else if (int_consts_.count(n)) v = int_consts_.at(n);
            if (v < 0 || t(r + 2) != "]") known = false;
            count *= (uint64_t)std::max(v, 0L);
            r += 3;
          }
          size = (size + fa - 1) / fa * fa + (uint32_t)(fs * count);
          align = std::max(align, fa);
          q = r + 1;  // past the ','
        }
      }
      a = m + 1;
    }
    if (known) struct_layout_[name] = {(size + align - 1) / align * align, align};
    k = close;
  }
}

uint32_t Rewriter::cuda_sizeof(const std::string& type, uint32_t* align) const {
  uint32_t s = 0, a = 0;
  if (!builtin_layout(type, &s, &a)) {
    auto it = struct_layout_.find(type);
    if (it == struct_layout_.end()) return 0;
    s = it->second.first, a = it->second.second;
  }
  if (align) *align = a;
  return s;
}

// The preprocessor's line markers (`# 12 "unary.metal" 2`) as #line directives; markers into the empty
// stand-in headers and the compiler's <built-in> go (the next marker restores the .metal file's lines).
std::string Rewriter::cuda_directive(const std::string& d) const {
  size_t i = 1;
  while (i < d.size() && (d[i] == ' ' || d[i] == '\t')) ++i;
  if (i >= d.size() || d[i] < '0' || d[i] > '9') return d;  // another directive (#pragma ...): kept
  const long line = std::strtol(d.c_str() + i, nullptr, 10);
  const size_t q0 = d.find('"'), q1 = q0 == std::string::npos ? q0 : d.find('"', q0 + 1);
  if (q1 == std::string::npos || line <= 0) return "";
  std::string file = d.substr(q0 + 1, q1 - q0 - 1);
  if (file.size() < 6 || file.compare(file.size() - 6, 6, ".metal") != 0) return "";
  return "#line " + std::to_string(line) + " \"" + file.substr(file.rfind('/') + 1) + "\"";
}

// One `extern "C" __global__` entry per kernel, with the parameters of cuda/kernels.h's contract, calling the
// kernel's body (a plain function: NVRTC compiles it with -default-device) with its attributes computed.
std::string Rewriter::cuda_wrappers(RewriteResult& res) {
  static const std::map<std::string, std::string> attr_field = {
      {"thread_position_in_grid", "tpig"},
      {"thread_position_in_threadgroup", "tpitg"},
      {"threadgroup_position_in_grid", "tgpig"},
      {"threads_per_threadgroup", "tptg"},
      {"dispatch_threads_per_threadgroup", "dtptg"},
      {"threads_per_grid", "tpg"},
      {"grid_size", "tpg"},
      {"threadgroups_per_grid", "tgpg"},
      {"thread_index_in_threadgroup", "tiitg"},
      {"thread_index_in_simdgroup", "lane"},
      {"simdgroup_index_in_threadgroup", "simd_id"},
      {"simdgroups_per_threadgroup", "simds"},
      {"dispatch_simdgroups_per_threadgroup", "simds"},
      {"threads_per_simdgroup", "width"},
      {"thread_execution_width", "width"},
  };
  std::string w = "\n// ---- generated by ember's MSL -> CUDA translation (cpp/msl/rewrite_cuda.cpp) ----\n";
  for (int fc : function_constants_)
    w += "#ifndef MSL_FC_" + std::to_string(fc) + "\n#error \"function constant " + std::to_string(fc) +
         " has no value: pass -DMSL_FC_" + std::to_string(fc) + "=<value>\"\n#endif\n";
  std::set<std::string> asserted;
  for (const KernelSite& ks : kernels_) {
    if (f64_ && ks.host_name.find("float64") == std::string::npos) continue;  // the variant's other kernels
    int open = ks.open, close = ks.close;
    std::map<std::string, std::string> subst;  // a template kernel's parameters -> this instance's arguments
    if (open < 0) {
      auto it = templates_.find(ks.fn);
      if (it == templates_.end())
        fail("kernel '" + ks.host_name + "': its template '" + ks.fn + "' is not defined in this source");
      open = it->second.open, close = it->second.close;
      std::vector<std::string> names, args;
      for (const std::string* src : std::initializer_list<const std::string*>{&it->second.names, &ks.targs}) {
        std::vector<std::string>& out = src == &ks.targs ? args : names;
        std::string cur;
        int angle = 0;
        for (char c : *src + ",") {
          if (c == '<') ++angle;
          if (c == '>') --angle;
          if (c == ',' && angle == 0) {
            while (!cur.empty() && cur.front() == ' ') cur.erase(0, 1);
            while (!cur.empty() && cur.back() == ' ') cur.pop_back();
            out.push_back(cur);
            cur.clear();
          } else {
            cur += c;
          }
        }
      }
      for (size_t i = 0; i < names.size() && i < args.size(); ++i) subst[names[i]] = args[i];
    }
    struct Arg {
      std::string decl, expr;
    };
    std::map<unsigned long, Arg> bufs;
    std::map<unsigned long, std::string> tgs;  // index -> the body's argument
    std::vector<std::pair<int, std::string>> call;  // (order, expression); order < 0: a buffer or tg index
    std::vector<std::string> exprs;
    CudaKernelParams sig;
    sig.host_name = ks.host_name;
    int a = open + 1, paren = 0, angle = 0;
    for (int k = open + 1; k <= close; ++k) {
      const std::string& s = t(k);
      if (attr_at(k)) continue;
      if (s == "(") ++paren;
      if (s == ")" && k != close) --paren;
      if (s == "<") ++angle;
      if (s == ">") --angle;
      if (!(k == close || (s == "," && paren == 0 && angle <= 0))) continue;
      if (k == a) {
        a = k + 1;
        continue;
      }
      std::string attr, space;
      int nm = -1;
      bool ptr = false, ref = false, is_const = false;
      std::string base;
      for (int m = a; m < k; ++m) {
        if (const Attr* at = attr_at(m)) {
          attr = at->text;
          m = at->end - 1;
          continue;
        }
        if (kind(m) == Tk::Ident) nm = m;
      }
      if (nm < 0) fail("cannot parse a parameter of kernel '" + ks.host_name + "'");
      for (int m = a; m < nm; ++m) {
        const std::string& u = t(m);
        if (u == "device" || u == "constant" || u == "threadgroup" || u == "thread") space = u;
        else if (u == "const") is_const = true;
        else if (u == "*") ptr = true;
        else if (u == "&") ref = true;
        else if (u != "volatile") base += (base.empty() || u == "::" || base.back() == ':' ? "" : " ") +
                                          (subst.count(u) ? subst.at(u) : u);
      }
      const std::string pname = t(nm);
      auto num = [&](const std::string& pre) -> unsigned long {
        const std::string d = attr.substr(pre.size() + 1, attr.size() - pre.size() - 2);
        if (d.empty() || d.find_first_not_of("0123456789") != std::string::npos || d.size() > 6)
          fail("kernel '" + ks.host_name + "': parameter '" + pname + "' has [[" + attr + "]]");
        return std::stoul(d);
      };
      const std::string cq = is_const ? "const " : "";
      if (attr.rfind("buffer(", 0) == 0) {
        const unsigned long n = num("buffer");
        const std::string b = "b" + std::to_string(n);
        if (bufs.count(n)) fail("kernel '" + ks.host_name + "': two parameters bind [[buffer(" + std::to_string(n) + ")]]");
        if (ptr) {
          bufs[n] = {cq + base + "* " + b, b};
        } else if (ref && space != "constant") {
          bufs[n] = {cq + base + "* " + b, "*" + b};
        } else {
          bufs[n] = {base + " " + b, b};
          uint32_t al = 0;
          const uint32_t size = cuda_sizeof(base, &al);
          if (size == 0) fail("kernel '" + ks.host_name + "': the size of by-value parameter '" + pname + "' (" + base +
                              ") is not known to the translator");
          if (asserted.insert(base).second)
            w += "static_assert(sizeof(" + base + ") == " + std::to_string(size) + ", \"the translator's size of " +
                 base + "\");\n";
        }
        exprs.push_back(bufs[n].expr);
      } else if (attr.rfind("threadgroup(", 0) == 0) {
        const unsigned long i = num("threadgroup");
        tgs[i] = "(" + cq + base + "*)(em_smem + em_tg" + std::to_string(i) + ")";
        exprs.push_back(tgs[i]);
      } else if (attr_field.count(attr)) {
        exprs.push_back("::emk::em_attr<" + base + ">(em." + attr_field.at(attr) + ")");
      } else {
        fail("kernel '" + ks.host_name + "': parameter '" + pname + "' has " +
             (attr.empty() ? std::string("no binding attribute") : "the unsupported attribute [[" + attr + "]]"));
      }
      a = k + 1;
    }
    std::string params;
    const unsigned long nbuf = bufs.empty() ? 0 : bufs.rbegin()->first + 1;
    sig.buffers.assign(nbuf, '-');
    sig.value_size.assign(nbuf, 0);
    for (const auto& [n, arg] : bufs) {
      params += (params.empty() ? "" : ", ") + arg.decl;
      const bool value = arg.decl.find('*') == std::string::npos;
      sig.buffers[n] = value ? 'v' : 'p';
      if (value) sig.value_size[n] = cuda_sizeof(arg.decl.substr(0, arg.decl.rfind(' ')), nullptr);
    }
    for (const auto& [i, e] : tgs) {
      params += (params.empty() ? "" : ", ") + std::string("unsigned int em_tg") + std::to_string(i);
      sig.threadgroup.push_back((uint32_t)i);
    }
    params += std::string(params.empty() ? "" : ", ") +
              "unsigned int em_grid_x, unsigned int em_grid_y, unsigned int em_grid_z, unsigned int em_off_x, "
              "unsigned int em_off_y, unsigned int em_off_z, unsigned int em_group_x, unsigned int em_group_y, "
              "unsigned int em_group_z";
    std::string args;
    for (const std::string& e : exprs) args += (args.empty() ? "" : ", ") + e;
    w += "extern \"C\" __global__ void " + ks.host_name + "(" + params + ") {\n" +
         "  const ::emk::em_pos em = ::emk::em_position(em_grid_x, em_grid_y, em_grid_z, em_off_x, em_off_y, "
         "em_off_z, em_group_x, em_group_y, em_group_z);\n";
    if (!tgs.empty()) w += "  extern __shared__ alignas(16) unsigned char em_smem[];\n";
    w += "  em_k_" + ks.call + "(" + args + ");\n}\n";
    res.cuda.push_back(std::move(sig));
  }
  w += "}  // namespace emk\n";
  return w;
}

}  // namespace ember::metal::emu::rw
