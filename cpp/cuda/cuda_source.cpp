// Reading a CUDA C++ source: a small lexer (comments, strings and preprocessor lines skipped), the
// __global__ kernels and their parameters, and the emulator's rewrite. Every rewrite keeps the text's line
// count, so the system compiler's errors name the user's lines (`#line 1 "<label>"` starts the unit).
#include "cuda/cuda_source.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "error.h"

namespace ember::cuda {
namespace {

struct Tok {
  enum Kind { Ident, Punct, Other } kind;
  size_t begin, end;  // byte range in the source
  std::string text;
  int line;
};

std::vector<Tok> lex(const std::string& s) {
  std::vector<Tok> out;
  size_t i = 0;
  int line = 1;
  bool line_start = true;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (c == '\n') {
      ++line, ++i, line_start = true;
      continue;
    }
    if (std::isspace((unsigned char)c)) {
      ++i;
      continue;
    }
    if (c == '#' && line_start) {  // a preprocessor line, with its continuations
      while (i < n && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\n') ++line, ++i;
        ++i;
      }
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < n && !(s[i] == '*' && s[i + 1] == '/')) line += s[i++] == '\n';
      i = std::min(n, i + 2);
      continue;
    }
    if (c == '"' || c == '\'') {
      const size_t b = i++;
      while (i < n && s[i] != c) {
        if (s[i] == '\\') ++i;
        if (i < n && s[i] == '\n') ++line;
        ++i;
      }
      ++i;
      out.push_back({Tok::Other, b, std::min(i, n), "", line});
      continue;
    }
    if (std::isalpha((unsigned char)c) || c == '_') {
      const size_t b = i;
      while (i < n && (std::isalnum((unsigned char)s[i]) || s[i] == '_')) ++i;
      out.push_back({Tok::Ident, b, i, s.substr(b, i - b), line});
      continue;
    }
    if (std::isdigit((unsigned char)c)) {
      const size_t b = i;
      while (i < n && (std::isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_')) ++i;
      out.push_back({Tok::Other, b, i, "", line});
      continue;
    }
    out.push_back({Tok::Punct, i, i + 1, std::string(1, c), line});
    ++i;
  }
  return out;
}

bool is(const Tok& t, const char* p) { return t.text == p; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace((unsigned char)s[b])) ++b;
  while (e > b && std::isspace((unsigned char)s[e - 1])) --e;
  return s.substr(b, e - b);
}

// The identifiers of `s` joined by single spaces, without cv-qualifiers (how known types are matched).
std::string canon(const std::string& s) {
  std::string out, word;
  auto flush = [&] {
    if (!word.empty() && word != "const" && word != "volatile") out += (out.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : s) {
    if (std::isalnum((unsigned char)c) || c == '_' || c == ':') word += c;
    else flush();
  }
  flush();
  return out;
}

bool known_dtype(const std::string& t, DType* dt) {
  static const std::map<std::string, DType> m = {
      {"float", DType::F32},        {"double", DType::F64},        {"__half", DType::F16},
      {"half", DType::F16},         {"__nv_bfloat16", DType::BF16}, {"nv_bfloat16", DType::BF16},
      {"int", DType::I32},          {"int32_t", DType::I32},       {"signed", DType::I32},
      {"signed int", DType::I32},   {"unsigned", DType::U32},      {"unsigned int", DType::U32},
      {"uint32_t", DType::U32},     {"long long", DType::I64},     {"long long int", DType::I64},
      {"int64_t", DType::I64},      {"long", DType::I64},          {"long int", DType::I64},
      {"unsigned char", DType::U8}, {"uint8_t", DType::U8},        {"bool", DType::Bool}};
  auto it = m.find(canon(t));
  if (it == m.end()) return false;
  *dt = it->second;
  return true;
}

bool known_scalar(const std::string& t, std::string* kind, uint32_t* bytes) {
  static const std::map<std::string, std::pair<const char*, uint32_t>> m = {
      {"float", {"float32", 4}},        {"double", {"float64", 8}},         {"__half", {"float16", 2}},
      {"half", {"float16", 2}},         {"int", {"int32", 4}},              {"int32_t", {"int32", 4}},
      {"signed int", {"int32", 4}},     {"unsigned", {"uint32", 4}},        {"unsigned int", {"uint32", 4}},
      {"uint32_t", {"uint32", 4}},      {"long long", {"int64", 8}},        {"long long int", {"int64", 8}},
      {"int64_t", {"int64", 8}},        {"long", {"int64", 8}},             {"unsigned long long", {"uint64", 8}},
      {"uint64_t", {"uint64", 8}},      {"size_t", {"uint64", 8}},          {"unsigned long", {"uint64", 8}},
      {"short", {"int16", 2}},          {"int16_t", {"int16", 2}},          {"unsigned short", {"uint16", 2}},
      {"uint16_t", {"uint16", 2}},      {"char", {"int8", 1}},              {"signed char", {"int8", 1}},
      {"int8_t", {"int8", 1}},          {"unsigned char", {"uint8", 1}},    {"uint8_t", {"uint8", 1}},
      {"bool", {"bool", 1}}};
  auto it = m.find(canon(t));
  if (it == m.end()) return false;
  *kind = it->second.first;
  *bytes = it->second.second;
  return true;
}

size_t newlines(const std::string& s, size_t b, size_t e) { return (size_t)std::count(s.begin() + b, s.begin() + e, '\n'); }

struct Edit {
  size_t begin, end;
  std::string text;
};

// Text of tokens [a, b) of the source with the identifiers in `drop` (and the parenthesised argument of
// those in `drop_call`) removed.
std::string strip(const std::string& src, const std::vector<Tok>& t, size_t a, size_t b,
                  std::initializer_list<const char*> drop, std::initializer_list<const char*> drop_call) {
  std::string out;
  for (size_t k = a; k < b; ++k) {
    bool skip = false;
    for (const char* d : drop) skip |= is(t[k], d);
    bool call = false;
    for (const char* d : drop_call) call |= is(t[k], d);
    if (call) {
      if (k + 1 < b && is(t[k + 1], "(")) {
        int depth = 0;
        for (++k; k < b; ++k) {
          depth += is(t[k], "(") - is(t[k], ")");
          if (depth == 0) break;
        }
      }
      continue;
    }
    if (skip) continue;
    if (!out.empty()) out += ' ';
    out += src.substr(t[k].begin, t[k].end - t[k].begin);
  }
  return out;
}

class Scanner {
 public:
  Scanner(const std::string& src, const std::string& label) : s_(src), label_(label), t_(lex(src)) {}

  ParsedSource run() {
    ParsedSource p;
    for (const char* w : {"__syncthreads", "__shared__", "_sync(", "__activemask", "__syncwarp"})
      p.uses_sync |= s_.find(w) != std::string::npos;
    int depth = 0;
    std::vector<std::pair<std::string, int>> ns;  // (name, the depth inside its braces)
    for (size_t i = 0; i < t_.size(); ++i) {
      const Tok& k = t_[i];
      if (is(k, "{")) {
        ++depth;
      } else if (is(k, "}")) {
        --depth;
        while (!ns.empty() && ns.back().second > depth) ns.pop_back();
      } else if (is(k, "namespace") && i + 1 < t_.size()) {
        size_t j = i + 1;
        std::string name;
        while (j < t_.size() && (t_[j].kind == Tok::Ident || is(t_[j], ":"))) name += t_[j++].text;
        if (j < t_.size() && is(t_[j], "{")) {
          ns.push_back({name, depth + 1});
          ++depth;
          i = j;
        }
      } else if (is(k, "__global__")) {
        kernel(i, ns, p);
      } else if (is(k, "__shared__") && depth > 0) {
        i = shared(i);
      }
    }
    std::string unit = "#line 1 \"" + label_ + "\"\n";
    size_t at = 0;
    std::sort(edits_.begin(), edits_.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
    for (const Edit& e : edits_) {
      unit += s_.substr(at, e.begin - at) + e.text;
      at = e.end;
    }
    unit += s_.substr(at);
    unit += "\n#line 1 \"<ember: kernel entries>\"\n" + wrappers(p);
    p.emu_unit = std::move(unit);
    return p;
  }

 private:
  // Index of the token closing the bracket at t_[i] ("(" / "[" / "{").
  size_t close(size_t i) const {
    const std::string o = t_[i].text, c = o == "(" ? ")" : o == "[" ? "]" : "}";
    int depth = 0;
    for (size_t k = i; k < t_.size(); ++k) {
      depth += (t_[k].text == o) - (t_[k].text == c);
      if (depth == 0) return k;
    }
    return t_.size();
  }

  std::string keep_lines(const std::string& text, size_t b, size_t e) const {
    return text + std::string(newlines(s_, b, e), '\n');
  }

  void kernel(size_t g, const std::vector<std::pair<std::string, int>>& ns, ParsedSource& p) {
    KernelDecl d;
    d.line = t_[g].line;
    for (size_t k = g; k-- > 0;) {  // back to the statement's start: a `template` there makes it one
      if (is(t_[k], ";") || is(t_[k], "{") || is(t_[k], "}")) break;
      if (is(t_[k], "template")) d.is_template = true;
      if (is(t_[k], "extern") && k + 1 < t_.size() && t_[k + 1].kind == Tok::Other) d.extern_c = true;
    }
    size_t i = g + 1, open = t_.size();
    std::string name;
    for (; i < t_.size(); ++i) {
      if (is(t_[i], "__launch_bounds__") && i + 1 < t_.size() && is(t_[i + 1], "(")) {
        i = close(i + 1);
        continue;
      }
      if (is(t_[i], "(")) {
        open = i;
        break;
      }
      if (is(t_[i], ";") || is(t_[i], "{")) return;
      if (t_[i].kind == Tok::Ident) name = t_[i].text;
    }
    if (open >= t_.size() || name.empty()) return;
    const size_t shut = close(open);
    size_t j = shut + 1;
    while (j < t_.size() && !is(t_[j], "{") && !is(t_[j], ";")) ++j;
    if (j >= t_.size() || is(t_[j], ";")) return;  // a declaration: the definition is what counts
    for (const auto& [n, depth] : ns) d.qualified += n.empty() ? "" : n + "::";
    d.qualified += name;
    d.name = d.extern_c ? name : d.qualified;
    // The parameters: split at top-level commas.
    size_t b = open + 1;
    int depth = 0;
    for (size_t k = open + 1; k <= shut; ++k) {
      if (is(t_[k], "(") || is(t_[k], "[") || is(t_[k], "<")) ++depth;
      if (is(t_[k], ")") || is(t_[k], "]") || is(t_[k], ">")) --depth;
      if ((depth == 0 && is(t_[k], ",")) || k == shut) {
        if (k > b) param(d, b, k);
        b = k + 1;
      }
    }
    if (d.params.size() == 1 && d.params[0].type == "void" && d.params[0].name.empty()) d.params.clear();
    p.kernels.push_back(std::move(d));
  }

  void param(KernelDecl& d, size_t b, size_t e) {
    Param pr;
    size_t end = e;
    for (size_t k = b; k < e; ++k)
      if (is(t_[k], "=")) {
        end = k;
        break;
      }
    size_t name_at = end;
    bool array = false;
    if (end >= b + 2 && is(t_[end - 1], "]") && is(t_[end - 2], "[")) array = true, end -= 2;
    if (end > b + 1 && t_[end - 1].kind == Tok::Ident && !is(t_[end - 1], "__restrict__") &&
        !is(t_[end - 1], "__restrict") && !is(t_[end - 1], "const")) {
      name_at = end - 1;
      pr.name = t_[name_at].text;
    }
    const size_t type_end = name_at < end ? name_at : end;
    std::string type = strip(s_, t_, b, type_end, {"__restrict__", "__restrict", "restrict", "__grid_constant__"}, {});
    for (size_t k = b; k < type_end; ++k)
      EMBER_CHECK(!is(t_[k], "&"), Value, "[cuda] ", label_, ":", t_[k].line, ": kernel '", d.name, "' takes '",
                  pr.name, "' by reference; a kernel's parameters are pointers or values");
    for (const char* glue : {" *", " :", ": ", " <", "< ", " >", " ,"})  // "const float *" -> "const float*"
      for (size_t q; (q = type.find(glue)) != std::string::npos;) type.erase(glue[0] == ' ' ? q : q + 1, 1);
    if (array) type += "*";
    const size_t star = type.rfind('*');
    if (star != std::string::npos && type.find('>', star) == std::string::npos) {
      pr.pointer = true;
      pr.pointee = trim(type.substr(0, star));
      pr.known = known_dtype(pr.pointee, &pr.dtype);
      // A checked pointer in the emulator; the parameter keeps its name and its lines.
      const std::string text = "::cuemu::gptr<" + pr.pointee + "> " + (pr.name.empty() ? "" : pr.name);
      edits_.push_back({t_[b].begin, t_[e - 1].end, keep_lines(text, t_[b].begin, t_[e - 1].end)});
    } else {
      pr.known = known_scalar(type, &pr.scalar_kind, &pr.scalar_bytes);
    }
    pr.type = trim(type);
    d.params.push_back(std::move(pr));
  }

  // `[extern] __shared__ T name[dims], ...;` in a function body -> references to the block's variables.
  size_t shared(size_t at) {
    size_t b = at;
    while (b > 0 && !is(t_[b - 1], ";") && !is(t_[b - 1], "{") && !is(t_[b - 1], "}") && !is(t_[b - 1], ":")) --b;
    size_t e = at;
    int depth = 0;
    for (; e < t_.size(); ++e) {
      depth += is(t_[e], "(") || is(t_[e], "[") ? 1 : is(t_[e], ")") || is(t_[e], "]") ? -1 : 0;
      if (depth == 0 && is(t_[e], ";")) break;
    }
    if (e >= t_.size()) return at;
    bool is_extern = false;
    std::vector<size_t> keep;
    for (size_t k = b; k < e; ++k) {
      if (is(t_[k], "extern")) is_extern = true;
      if (is(t_[k], "__align__") || is(t_[k], "alignas")) {
        k = close(k + 1);
        continue;
      }
      if (is(t_[k], "extern") || is(t_[k], "static") || is(t_[k], "__shared__") || is(t_[k], "__device__")) continue;
      keep.push_back(k);
    }
    // Declarators at top-level commas; the first carries the base type.
    std::vector<std::vector<size_t>> decls(1);
    depth = 0;
    for (size_t k : keep) {
      depth += is(t_[k], "(") || is(t_[k], "[") || is(t_[k], "<") ? 1 : is(t_[k], ")") || is(t_[k], "]") || is(t_[k], ">") ? -1 : 0;
      if (depth == 0 && is(t_[k], ",")) decls.emplace_back();
      else decls.back().push_back(k);
    }
    std::string base, out;
    for (size_t n = 0; n < decls.size(); ++n) {
      const auto& d = decls[n];
      size_t name = d.size();
      for (size_t q = 0; q < d.size(); ++q) {
        if (is(t_[d[q]], "[") || is(t_[d[q]], "=")) break;
        if (t_[d[q]].kind == Tok::Ident) name = q;
      }
      if (name == d.size()) return e;  // not a declaration this scanner understands: the compiler reports it
      std::string type;
      for (size_t q = 0; q < name; ++q) type += src(d[q]) + (q + 1 < name ? " " : "");
      if (n == 0) {
        base = type;
        while (!base.empty() && (base.back() == '*' || base.back() == ' ')) base.pop_back();
      } else {
        type = base + " " + type;
      }
      std::string dims;
      for (size_t q = name + 1; q < d.size(); ++q) dims += src(d[q]);
      const std::string var = t_[d[name]].text;
      if (is_extern) {
        out += type + "* " + var + " = ::cuemu::dynamic_shared<" + type + ">(); ";
      } else {
        out += "auto& " + var + " = ::cuemu::shared_var<" + type + " " + dims + ">(" + std::to_string(site_++) + "u); ";
      }
    }
    edits_.push_back({t_[b].begin, t_[e].end, keep_lines(out, t_[b].begin, t_[e].end)});
    return e;
  }

  std::string src(size_t k) const { return s_.substr(t_[k].begin, t_[k].end - t_[k].begin); }

  std::string wrappers(const ParsedSource& p) const {
    std::string w = "namespace {\n", table;
    int n = 0;
    for (const KernelDecl& d : p.kernels) {
      if (d.is_template) continue;
      const std::string id = std::to_string(n++);
      std::string args;
      for (size_t i = 0; i < d.params.size(); ++i) {
        const Param& pr = d.params[i];
        const std::string what = "argument " + std::to_string(i) + " ('" + pr.name + "', " + pr.type + ")";
        const std::string t = pr.pointer ? "::cuemu::gptr<" + pr.pointee + ">" : "std::remove_cv_t<" + pr.type + ">";
        args += std::string(i ? ", " : "") + "::cuemu::binder<" + t + ">::get(t, " + std::to_string(i) + ", \"" +
                what + "\")";
      }
      if (d.extern_c && d.qualified != d.name) {
        // its parameter types are named in its namespace: bound through the function's own type
        std::string what;
        for (size_t i = 0; i < d.params.size(); ++i)
          what += "\"argument " + std::to_string(i) + " ('" + d.params[i].name + "', " + d.params[i].type + ")\", ";
        w += "void cuemu_entry_" + id + "(msl_abi::Thread* t) { static const char* const what[] = {" + what +
             "nullptr}; ::cuemu::run_entry([&] { ::cuemu::invoke(t, &::" + d.qualified + ", what); }); }\n";
      } else {
        w += "void cuemu_entry_" + id + "(msl_abi::Thread* t) { (void)t; ::cuemu::run_entry([&] { ::" + d.qualified +
             "(" + args + "); }); }\n";
      }
      std::string bufs;
      for (size_t i = 0; i < d.params.size(); ++i) bufs += "{" + std::to_string(i) + "u, 0u}, ";
      w += "const msl_abi::BufferUse cuemu_bufs_" + id + "[] = {" + bufs + "{0xffffffffu, 0u}};\n";
      table += "  {\"" + d.name + "\", cuemu_entry_" + id + ", cuemu_bufs_" + id + ", " + (p.uses_sync ? "1u" : "0u") +
               "},\n";
    }
    if (table.empty()) table = "  {\"\", nullptr, nullptr, 0u},\n";
    w += "const msl_abi::Kernel cuemu_kernels[] = {\n" + table + "};\n}  // namespace\n";
    w += "extern \"C\" __attribute__((visibility(\"default\"))) uint32_t msl_module_init(const msl_abi::Api* a) {\n"
         "  ::cuemu::api = a;\n  return msl_abi::kVersion;\n}\n";
    w += "extern \"C\" __attribute__((visibility(\"default\"))) const msl_abi::Kernel* msl_module_kernels(uint32_t* n) {\n"
         "  *n = " + std::to_string(n) + "u;\n  return cuemu_kernels;\n}\n";
    return w;
  }

  const std::string& s_;
  const std::string& label_;
  std::vector<Tok> t_;
  std::vector<Edit> edits_;
  uint32_t site_ = 0;
};

}  // namespace

ParsedSource parse_source(const std::string& source, const std::string& label) { return Scanner(source, label).run(); }

const KernelDecl& find_kernel(const ParsedSource& p, const std::string& name, const std::string& label) {
  const KernelDecl* hit = nullptr;
  for (const KernelDecl& d : p.kernels) {
    const size_t c = d.name.rfind("::");
    if (d.name == name || (c != std::string::npos && d.name.substr(c + 2) == name)) {
      hit = &d;
      if (d.name == name) break;
    }
  }
  if (!hit) {
    std::string have;
    for (const KernelDecl& d : p.kernels) have += (have.empty() ? "" : ", ") + d.name;
    throw Error(ErrorKind::Value, cat_str("[cuda] ", label, " defines no __global__ function '", name, "' (it defines: ",
                                          have.empty() ? "none" : have, ")"));
  }
  EMBER_CHECK(!hit->is_template, Value, "[cuda] ", label, ":", hit->line, ": kernel '", name,
              "' is a template; ember launches plain __global__ functions (write one that calls the instance)");
  return *hit;
}

}  // namespace ember::cuda
