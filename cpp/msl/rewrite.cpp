// The MSL -> C++ rewriter: a token-level pass over preprocessed MSL that keeps line numbers, so the
// compiler's messages point at the kernel's own lines.
#include "msl/rewrite.h"

#include "msl/rewrite_impl.h"

namespace ember::metal::emu::rw {
namespace {

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }
bool digit(char c) { return c >= '0' && c <= '9'; }
// The name in `host_name("a" "b")` (macros paste names as adjacent literals): the literals' text joined.
std::string host_name_of(const std::string& attr) {
  std::string out;
  for (size_t i = attr.find('"'); i != std::string::npos && i + 1 < attr.size(); i = attr.find('"', i + 1)) {
    const size_t e = attr.find('"', i + 1);
    if (e == std::string::npos) break;
    out += attr.substr(i + 1, e - i - 1);
    i = e;
  }
  return out;
}
}  // namespace

std::vector<Tok> tokenize(const std::string& s) {
  std::vector<Tok> out;
  size_t i = 0;
  const size_t n = s.size();
  bool line_start = true;
  static const char* multi[] = {"::", "->", "++", "--", "&&", "||", "==", "!=", "<=", ">=", "+=", "-=", "*=",
                                "/=", "%=", "&=", "|=", "^=", "..."};
  while (i < n) {
    const char c = s[i];
    const size_t b = i;
    if (c == '\n' || c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v' || s[i] == '\n')) {
        if (s[i] == '\n') line_start = true;
        ++i;
      }
      out.push_back({Tk::Space, s.substr(b, i - b)});
      continue;
    }
    if (line_start && c == '#') {
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n') ++i;
        ++i;
      }
      out.push_back({Tk::Directive, s.substr(b, i - b)});
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      out.push_back({Tk::Space, s.substr(b, i - b)});
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) ++i;
      i = std::min(n, i + 2);
      out.push_back({Tk::Space, s.substr(b, i - b)});
      continue;
    }
    if (ident_start(c)) {
      while (i < n && ident_char(s[i])) ++i;
      out.push_back({Tk::Ident, s.substr(b, i - b)});
      continue;
    }
    if (digit(c) || (c == '.' && i + 1 < n && digit(s[i + 1]))) {
      while (i < n) {
        if ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P')) {
          ++i;
        } else if (ident_char(s[i]) || s[i] == '.') {
          ++i;
        } else {
          break;
        }
      }
      out.push_back({Tk::Number, s.substr(b, i - b)});
      continue;
    }
    if (c == '"' || c == '\'') {
      ++i;
      while (i < n && s[i] != c && s[i] != '\n') {
        if (s[i] == '\\') ++i;
        ++i;
      }
      i = std::min(n, i + 1);
      out.push_back({Tk::Str, s.substr(b, i - b)});
      continue;
    }
    size_t len = 1;
    for (const char* m : multi) {
      const size_t ml = std::char_traits<char>::length(m);
      if (s.compare(i, ml, m) == 0 && ml > len) len = ml;
    }
    out.push_back({Tk::Punct, s.substr(i, len)});
    i += len;
  }
  return out;
}

// `[[...]]`: recorded for the parameter parser, removed from the output.
int Rewriter::attribute(int k) {
  int j = k + 2, depth = 0;
  for (; j + 1 < (int)sig_.size(); ++j) {
    if (t(j) == "[") ++depth;
    if (t(j) == "]") {
      if (depth == 0 && t(j + 1) == "]") break;
      --depth;
    }
  }
  if (j + 1 >= (int)sig_.size()) fail("unterminated [[ attribute");
  std::string text;  // without spaces, so "buffer ( 0 )" reads as "buffer(0)"
  for (int m = k + 2; m < j; ++m) text += t(m);
  attrs_.push_back({k, j + 2, text});
  replace(k, j + 1, "");
  return j + 1;
}

// device/constant pointers become checked pointers; references and values just lose the qualifier.
// const is dropped from the pointee so that template deduction works as on Metal: the static
// check (address spaces and const kept) is what enforces const-correctness.
void Rewriter::address_space(int& k) {
  const std::string& q = t(k);
  int j = k + 1, angle = 0;
  static const std::set<std::string> stop = {"*", "&", "&&", ",", ")", ";", "=", "[", "{", "(", "]"};
  for (; j < (int)sig_.size(); ++j) {
    if (t(j) == "<") ++angle;
    else if (t(j) == ">") --angle;
    else if (angle <= 0 && stop.count(t(j))) break;
  }
  const bool const_near = t(k - 1) == "const" || t(k + 1) == "const";
  if (t(j) == "*" && mode_ == RewriteMode::Cuda) {  // a plain pointer; const stays as written
    replace(k, k, q == "constant" && !const_near ? "const" : "");
    return;
  }
  if (t(j) == "*") {
    if (t(k - 1) == "const") replace(k - 1, k - 1, "");
    std::string type;
    for (int m = k + 1; m < j; ++m)
      if (t(m) != "const") type += (type.empty() ? "" : " ") + t(m);
    replace(k, j, "::msl::dptr<" + type + ">");
    k = j;
    return;
  }
  if (t(j) == "&" && q == "device" && t(k - 1) != "const" && in_kernel_params(k)) {
    // A kernel's `device T& x [[buffer(n)]]`: a checked reference for scalars and atomics (msl_cpu.h dref).
    bool has_const = false;
    std::string type;
    for (int m = k + 1; m < j; ++m) {
      has_const = has_const || t(m) == "const";
      type += (type.empty() ? "" : " ") + t(m);
    }
    if (!has_const && mode_ == RewriteMode::Emulate) {
      replace(k, j, "::msl::dref_t<" + type + ">");
      k = j;
      return;
    }
  }
  if (t(j) == "&" || t(j) == "&&") {
    replace(k, k, q == "constant" && !const_near ? "const" : "");
    return;
  }
  if (q == "constant" && depth_ == 0) {
    // `constant T name [[function_constant(i)]];` takes its value from the pipeline's constants.
    int e = k;
    while (e < (int)sig_.size() && t(e) != ";") ++e;
    for (int m = k; m + 3 < e; ++m) {
      if (t(m) == "[" && t(m + 1) == "[" && t(m + 2) == "function_constant" && t(m + 3) == "(") {
        const int idx = std::atoi(t(m + 4).c_str());
        const std::string nm = t(m - 1), type = source_text(k + 1, m - 1);
        function_constants_.insert(idx);
        replace(k, e, "static const " + type + " " + nm + " = (" + type + ")(MSL_FC_" + std::to_string(idx) + ");");
        k = e;
        return;
      }
    }
  }
  replace(k, k, q == "constant" && !const_near ? "const" : "");
}

// `threadgroup T name[N];` in a function body: one object per threadgroup, shared by its threads.
void Rewriter::threadgroup_var(int& k) {
  int e = k + 1, depth = 0;  // inside [..] an array size may be any expression (`float s[A * B];`)
  while (e < (int)sig_.size() && t(e) != ";") {
    const std::string& u = t(e);
    if (u == "[") ++depth;
    else if (u == "]") --depth;
    else if (depth == 0 && (u == "*" || u == "&" || u == "(" || u == "=" || u == "{" || u == ","))
      return;  // not a plain variable
    ++e;
  }
  int bracket = e;
  for (int m = k + 1; m < e; ++m)
    if (t(m) == "[") {
      bracket = m;
      break;
    }
  const int nm = bracket - 1;
  if (nm <= k + 1 || kind(nm) != Tk::Ident) fail("cannot parse the threadgroup declaration '" + source_text(k, e) + "'");
  if (mode_ == RewriteMode::Static) {
    replace(k, k, "static threadgroup");
    return;
  }
  if (mode_ == RewriteMode::Cuda) {  // block-shared; the CUDA emulator's rewrite makes it per-block storage
    replace(k, k, "__shared__");
    return;
  }
  const std::string type = source_text(k + 1, nm) + " " + source_text(bracket, e);
  replace(k, e, "auto& " + t(nm) + " = *::msl::tg_decl<::msl::tgwrap_t<" + type + ">>(" + std::to_string(tg_sites_++) +
                    "u);");
  k = e;
}

// Floating literals are float in MSL (no double), and `h` marks a half.
void Rewriter::literal(int k) {
  const std::string& s = t(k);
  if (s.size() > 1 && (s[1] == 'x' || s[1] == 'X')) return;
  const bool is_float = s.find('.') != std::string::npos || s.find_first_of("eE") != std::string::npos;
  const char last = s.back();
  if (last == 'h' || last == 'H') {
    replace(k, k, "half(" + s.substr(0, s.size() - 1) + (is_float ? "f" : ".0f") + ")");
  } else if (is_float && last != 'f' && last != 'F' && !f64_) {  // the float64 variant's literals are double
    replace(k, k, s + "f");
  }
}

void Rewriter::swizzle(int k) {
  const std::string& s = t(k);
  if (s.size() < 2 || s.size() > 4 || t(k + 1) == "(") return;
  std::string idx;
  const bool xyzw = s.find_first_not_of("xyzw") == std::string::npos;
  const bool rgba = s.find_first_not_of("rgba") == std::string::npos;
  if (!xyzw && !rgba) return;
  for (char c : s) {
    const char* set = xyzw ? "xyzw" : "rgba";
    idx += (idx.empty() ? "" : ",") + std::to_string(std::char_traits<char>::find(set, 4, c) - set);
  }
  replace(k, k, "template swz<" + idx + ">()");
}

void Rewriter::kernel_definition(int k, bool is_template, const std::string& host_name) {
  // k is the `void`; then the name and the parameter list
  if (kind(k + 1) != Tk::Ident || t(k + 2) != "(") fail("cannot parse the kernel after 'kernel void'");
  const int close = match(k + 2, "(", ")");
  kernel_params_.emplace_back(k + 2, close);
  note_ref_params(k + 2, close);
  // CUDA: the body gets its own name; the host name is its extern "C" entry's (rewrite_cuda.cpp)
  if (mode_ == RewriteMode::Cuda) replace(k + 1, k + 1, "em_k_" + t(k + 1));
  if (is_template) {  // its kernels are the explicit instantiations; the wrapper is generated from here
    TemplateKernel tk{source_text(template_start_, template_end_ + 1), "", k + 2, close};
    int a = template_start_ + 2, angle = 0;
    for (int m = a; m <= template_end_; ++m) {
      if (t(m) == "<") ++angle;
      if (t(m) == ">") --angle;
      if ((t(m) == "," && angle == 0) || m == template_end_) {
        int nm = -1;
        bool pack = false;
        for (int q = a; q < m && t(q) != "="; ++q) {
          if (kind(q) == Tk::Ident) nm = q;
          if (t(q) == "...") pack = true;
        }
        if (nm >= 0) tk.names += (tk.names.empty() ? "" : ", ") + t(nm) + (pack ? "..." : "");
        a = m + 1;
      }
    }
    templates_[t(k + 1)] = tk;
    return;
  }
  kernels_.push_back({host_name.empty() ? t(k + 1) : host_name, t(k + 1), k + 2, close, {}, {}});
}

// Records the reference parameters bound to buffers of the kernel whose parameter list is (open, close),
// for ref_address in its body.
void Rewriter::note_ref_params(int open, int close) {
  if (mode_ != RewriteMode::Emulate || t(close + 1) != "{") return;
  RefScope rs{close + 1, match(close + 1, "{", "}"), {}};
  int a = open + 1, paren = 0, angle = 0;
  for (int k = open + 1; k <= close; ++k) {
    const std::string& s = t(k);
    if (s == "(") ++paren;
    if (s == ")") --paren;
    if (s == "<") ++angle;
    if (s == ">") --angle;
    if (k != close && !(s == "," && paren == 0 && angle <= 0)) continue;
    bool space = false, ref = false, ptr = false;
    std::string name, buf;
    for (int m = a; m < k; ++m) {
      if (t(m) == "[" && t(m + 1) == "[") {
        if (t(m + 2) == "buffer" && t(m + 3) == "(" && t(m + 5) == ")" &&
            t(m + 4).find_first_not_of("0123456789") == std::string::npos)
          buf = t(m + 4);
        break;
      }
      space = space || t(m) == "device" || t(m) == "constant";
      ref = ref || t(m) == "&";
      ptr = ptr || t(m) == "*";
      if (kind(m) == Tk::Ident) name = t(m);
    }
    if (space && ref && !ptr && !name.empty() && !buf.empty() && buf.size() < 10) rs.buffer[name] = std::stoul(buf);
    a = k + 1;
  }
  if (!rs.buffer.empty()) ref_scopes_.push_back(rs);
}

// `&x`, `&x.m[i]...` of such a parameter x in its kernel's body: a checked pointer into x's binding
// (msl_cpu.h ref_in), so `(&x)[i]` is bounds-checked like any device pointer.
void Rewriter::ref_address(int k) {
  const RefScope* rs = nullptr;
  for (const RefScope& r : ref_scopes_)
    if (k > r.begin && k < r.end) rs = &r;
  if (!rs || kind(k + 1) != Tk::Ident || !rs->buffer.count(t(k + 1))) return;
  const std::string& p = t(k - 1);  // a binary & follows an operand
  if (kind(k - 1) == Tk::Number || kind(k - 1) == Tk::Str || p == ")" || p == "]") return;
  if (kind(k - 1) == Tk::Ident && p != "return" && p != "case") return;
  int e = k + 1;
  for (;;) {
    if (t(e + 1) == "." && kind(e + 2) == Tk::Ident && t(e + 3) != "(") e += 2;
    else if (t(e + 1) == "[") e = match(e + 1, "[", "]");
    else break;
  }
  if (t(e + 1) == "(" || t(e + 1) == "->" || t(e + 1) == "::") return;  // not the address of a plain lvalue
  const std::string n = std::to_string(rs->buffer.at(t(k + 1))) + "u, ";
  replace(k, k, "::msl::ref_in(" + n + (e == k + 1 ? "&" : "&" + t(k + 1) + ", &"));
  after_[sig_[e]] += ")";
}

// `template [[host_name("x")]] [[kernel]] void fn<T>(params);` names one instantiation as a kernel.
void Rewriter::instantiation(int& k) {
  if (mode_ == RewriteMode::Cuda) instantiations_.push_back(k);
  int j = k + 1;
  std::string host;
  while (t(j) == "[" && t(j + 1) == "[") {
    const int start = j;
    j = attribute(j) + 1;
    const std::string& a = attrs_.back().text;
    if (a.rfind("host_name", 0) == 0) host = host_name_of(a);
    (void)start;
  }
  if (t(j) == "decltype") {  // template [[host_name("x")]] [[kernel]] decltype(fn<T>) fn<T>;
    const int e = match(j + 1, "(", ")");
    const std::string fn = t(e + 1);
    if (kind(e + 1) != Tk::Ident || t(e + 2) != "<") fail("cannot parse the instantiation after 'decltype'");
    const int ae = match(e + 2, "<", ">");
    const std::string targs = source_text(e + 3, ae);
    kernels_.push_back({host.empty() ? fn : host, fn + "<" + targs + ">", -1, -1, fn, targs});
    k = ae;
    return;
  }
  if (t(j) != "void") {
    k = j - 1;
    return;  // an ordinary explicit instantiation with attributes; nothing to register
  }
  const std::string fn = t(j + 1);
  int m = j + 2;
  std::string call = fn, targs;
  if (t(m) == "<") {
    const int e = match(m, "<", ">");
    targs = source_text(m + 1, e);
    call += "<" + targs + ">";
    m = e + 1;
  }
  if (t(m) != "(") fail("cannot parse the instantiation of '" + fn + "'");
  const int close = match(m, "(", ")");
  kernel_params_.emplace_back(m, close);
  if (host.empty()) host = fn;
  kernels_.push_back({host, call, m, close, targs.empty() ? "" : fn, targs});
  k = j;  // the parameter list is rewritten by the main loop like any other
}

RewriteResult Rewriter::run() {
  RewriteResult res;
  if (mode_ == RewriteMode::Cuda) cuda_structs();
  for (int k = 0; k < (int)sig_.size(); ++k) {
    const std::string& s = t(k);
    const Tk kd = kind(k);
    if (s == "{") ++depth_;
    if (s == "}") --depth_;
    if (s == "[" && t(k + 1) == "[") {
      const int end = attribute(k);
      const std::string& a = attrs_.back().text;
      if (a == "kernel") pending_kernel_ = true;
      if (a.rfind("host_name", 0) == 0) pending_host_name_ = host_name_of(a);
      k = end;
      continue;
    }
    if (kd == Tk::Ident && (s == "threadgroup_barrier" || s == "simdgroup_barrier" || s.rfind("simd_", 0) == 0))
      res.uses_sync = true;
    if (s == "template" && t(k + 1) == "<") {
      template_start_ = k;
      template_end_ = match(k + 1, "<", ">");
      k = template_end_;
      continue;
    }
    if (s == "template" && t(k + 1) == "[" && t(k + 2) == "[") {
      instantiation(k);
      continue;
    }
    if (kd == Tk::Ident && !member(k)) {
      if (s == "kernel" && t(k + 1) == "void") {
        const bool is_template = template_end_ == k - 1 || (pending_kernel_ && template_end_ >= 0 &&
                                                             attrs_.size() && attrs_.back().begin == template_end_ + 1);
        replace(k, k, "");
        kernel_definition(k + 1, is_template, pending_host_name_);
        pending_host_name_.clear();
        pending_kernel_ = false;
        continue;
      }
      if (s == "void" && pending_kernel_) {
        const bool is_template = !attrs_.empty() && attrs_.back().begin == template_end_ + 1;
        kernel_definition(k, is_template, pending_host_name_);
        pending_host_name_.clear();
        pending_kernel_ = false;
        continue;
      }
      if (s == "threadgroup" && depth_ > 0 && (t(k - 1) == ";" || t(k - 1) == "{" || t(k - 1) == "}")) {
        threadgroup_var(k);
        if (t(k) == ";") continue;
      }
      if (mode_ != RewriteMode::Static) {
        if (s == "device" || s == "constant") {
          address_space(k);
          continue;
        }
        if (s == "thread" || (s == "threadgroup" && out_[sig_[k]].rfind("__shared__", 0) != 0)) {
          replace(k, k, "");
          continue;
        }
      }
      if (t(k - 1) == "." && mode_ != RewriteMode::Static) swizzle(k);  // clang's vectors have swizzles
      continue;
    }
    if (kd == Tk::Ident && t(k - 1) == "." && mode_ != RewriteMode::Static) swizzle(k);
    if (kd == Tk::Number) literal(k);
    if (s == "&" && mode_ == RewriteMode::Emulate) ref_address(k);
  }
  if (mode_ == RewriteMode::Emulate) {
    out_.push_back(wrappers(res.uses_sync));
  }
  if (mode_ == RewriteMode::Cuda) {
    for (int start : instantiations_) {  // the entries instantiate the kernels; the statements go
      int e = start;
      while (e < (int)sig_.size() && t(e) != ";") e = t(e) == "(" ? match(e, "(", ")") + 1 : e + 1;
      replace(start, std::min(e, (int)sig_.size() - 1), "");
    }
    for (size_t r = 0; r < raw_.size(); ++r)
      if (raw_[r].kind == Tk::Directive) out_[r] = cuda_directive(raw_[r].text);
    out_.insert(out_.begin(), "namespace emk {\n");
    after_ = {};  // (Emulate only)
    out_.push_back(cuda_wrappers(res));
  }
  for (size_t r = 0; r < out_.size(); ++r) {
    res.text += out_[r];
    if (auto it = after_.find((int)r); it != after_.end()) res.text += it->second;
  }
  for (const auto& ks : kernels_) res.kernels.push_back(ks.host_name);
  return res;
}

std::vector<Param> Rewriter::params(const KernelSite& ks) const {
  std::vector<Param> ps;
  int a = ks.open + 1;
  int paren = 0, angle = 0;
  for (int k = ks.open + 1; k <= ks.close; ++k) {
    const std::string& s = t(k);
    if (attr_at(k)) continue;
    if (s == "(") ++paren;
    if (s == "<") ++angle;
    if (s == ">") --angle;
    if (k == ks.close || (s == "," && paren == 0 && angle <= 0)) {
      if (k > a) {
        Param p;
        int nm = -1;
        for (int m = a; m < k; ++m) {
          if (const Attr* at = attr_at(m)) {
            p.attr = at->text;
            m = at->end - 1;
          } else if (kind(m) == Tk::Ident) {
            nm = m;
          }
        }
        if (nm < 0) fail("cannot parse a parameter of kernel '" + ks.host_name + "'");
        p.name = t(nm);
        p.type = output_text(a, nm);
        ps.push_back(p);
      }
      a = k + 1;
    }
    if (s == ")") --paren;
  }
  return ps;
}

// The entry wrappers: one per kernel, binding each parameter from the runtime's Thread record.
std::string Rewriter::wrappers(bool uses_sync) const {
  static const std::map<std::string, std::string> attr_field = {
      {"thread_position_in_grid", "t->tpig"},
      {"thread_position_in_threadgroup", "t->tpitg"},
      {"threadgroup_position_in_grid", "t->tgpig"},
      {"threads_per_threadgroup", "t->tptg"},
      {"dispatch_threads_per_threadgroup", "t->dtptg"},
      {"threads_per_grid", "t->tpg"},
      {"grid_size", "t->tpg"},
      {"threadgroups_per_grid", "t->tgpg"},
      {"thread_index_in_threadgroup", "&t->tiitg"},
      {"thread_index_in_simdgroup", "&t->lane"},
      {"simdgroup_index_in_threadgroup", "&t->simd_id"},
      {"simdgroups_per_threadgroup", "&t->simds"},
      {"dispatch_simdgroups_per_threadgroup", "&t->simds"},
      {"threads_per_simdgroup", "::msl::simd_width_value"},
      {"thread_execution_width", "::msl::simd_width_value"},
  };
  std::string w = "\n// ---- generated by ember's MSL emulator ----\n";
  for (int fc : function_constants_)
    w += "#ifndef MSL_FC_" + std::to_string(fc) + "\n#error \"function constant " + std::to_string(fc) +
         " has no value: pass it in the pipeline's constants\"\n#endif\n";
  // The arguments of one kernel's call and its [[buffer]] table, from a parameter list.
  auto bind = [&](const KernelSite& ks, std::string& args, std::string& bufs) {
    for (const Param& p : params(ks)) {
      const std::string& a = p.attr;
      std::string arg;
      auto num = [&](const std::string& pre) { return a.substr(pre.size() + 1, a.size() - pre.size() - 2); };
      if (a.rfind("buffer(", 0) == 0) {
        arg = "::msl::binder<" + p.type + ">::get(t, " + num("buffer") + ")";
        bufs += "{" + num("buffer") + "u, ::msl::binder<" + p.type + ">::min_size}, ";
      } else if (a.rfind("threadgroup(", 0) == 0) {
        arg = "::msl::tg_param<" + p.type + ">(t, " + num("threadgroup") + ")";
      } else if (attr_field.count(a)) {
        arg = "::msl::attr<std::decay_t<" + p.type + ">>(" + attr_field.at(a) + ")";
      } else {
        fail("kernel '" + ks.host_name + "': parameter '" + p.name + "' has " +
             (a.empty() ? std::string("no binding attribute") : "the unsupported attribute [[" + a + "]]"));
      }
      args += (args.empty() ? "" : ", ") + arg;
    }
  };
  // Template kernels: one templated wrapper per definition, instantiated by each [[host_name]] line.
  std::set<std::string> wrapped;
  for (const KernelSite& ks : kernels_) {
    if (ks.fn.empty() || !templates_.count(ks.fn) || wrapped.count(ks.fn)) continue;
    wrapped.insert(ks.fn);
    const TemplateKernel& tk = templates_.at(ks.fn);
    std::string args, bufs;
    bind(KernelSite{ks.fn, ks.fn, tk.open, tk.close, "", ""}, args, bufs);
    w += tk.header + " static void msl_wrap_" + ks.fn + "(msl_abi::Thread* t) { (void)t; ::msl::run_entry([&] { " +
         ks.fn + "<" + tk.names + ">(" + args + "); }); }\n";
    w += tk.header + " static const msl_abi::BufferUse* msl_bufs_" + ks.fn +
         "() { static const msl_abi::BufferUse b[] = {" + bufs + "{0xffffffffu, 0}}; return b; }\n";
  }
  std::string table;
  for (size_t i = 0; i < kernels_.size(); ++i) {
    const KernelSite& ks = kernels_[i];
    const std::string id = std::to_string(i);
    const std::string sync = uses_sync ? "1u" : "0u";
    if (wrapped.count(ks.fn)) {
      table += "  {\"" + ks.host_name + "\", msl_wrap_" + ks.fn + "<" + ks.targs + ">, msl_bufs_" + ks.fn + "<" +
               ks.targs + ">(), " + sync + "},\n";
      continue;
    }
    if (ks.open < 0) fail("kernel '" + ks.host_name + "': its template '" + ks.fn + "' is not defined in this source");
    std::string args, bufs;
    bind(ks, args, bufs);
    w += "static void msl_entry_" + id + "(msl_abi::Thread* t) { (void)t; ::msl::run_entry([&] { " + ks.call + "(" +
         args + "); }); }\n";
    w += "static const msl_abi::BufferUse msl_bufs_" + id + "[] = {" + bufs + "{0xffffffffu, 0}};\n";
    table += "  {\"" + ks.host_name + "\", msl_entry_" + id + ", msl_bufs_" + id + ", " + sync + "},\n";
  }
  if (table.empty()) table = "  {nullptr, nullptr, nullptr, 0u},\n";
  w += "static const msl_abi::Kernel msl_kernels[] = {\n" + table + "};\n";
  w += "extern \"C\" __attribute__((visibility(\"default\"))) uint32_t msl_module_init(const msl_abi::Api* a) {\n"
       "  ::msl::api = a;\n  return msl_abi::kVersion;\n}\n";
  w += "extern \"C\" __attribute__((visibility(\"default\"))) const msl_abi::Kernel* msl_module_kernels(uint32_t* n) {\n"
       "  *n = " + std::to_string(kernels_.size()) + "u;\n  return msl_kernels;\n}\n";
  return w;
}

}  // namespace ember::metal::emu::rw

namespace ember::metal::emu {

RewriteResult rewrite_msl(const std::string& source, const std::string& name, RewriteMode mode, bool f64) {
  return rw::Rewriter(source, name, mode, f64 && mode == RewriteMode::Cuda).run();
}

}  // namespace ember::metal::emu
