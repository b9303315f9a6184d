// The MSL rewriter's internals, shared by its two translation units: rewrite.cpp (the token pass, the Metal
// emulator's wrappers) and rewrite_cuda.cpp (the CUDA translation's parameters, wrappers and struct sizes).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "error.h"
#include "msl/rewrite.h"

namespace ember::metal::emu::rw {

enum class Tk { Ident, Number, Str, Punct, Space, Directive };
struct Tok {
  Tk kind;
  std::string text;
};

std::vector<Tok> tokenize(const std::string& s);

struct Attr {
  int begin, end;  // significant-token range [begin, end) of `[[ ... ]]`
  std::string text;
};

struct Param {
  std::string type, name, attr;
};

struct KernelSite {
  std::string host_name;  // the name a pipeline asks for
  std::string call;       // what the wrapper calls: fn or fn<args>
  int open, close;        // significant indices of the parameter list's parentheses
  std::string fn, targs;  // an instantiation of a template kernel: its name and template arguments
};

// A template kernel's definition: its wrapper is a template too, instantiated per [[host_name]].
struct TemplateKernel {
  std::string header;  // "template <typename Op, typename T>"
  std::string names;   // "Op, T" (packs as "Ts...")
  int open, close;
};

class Rewriter {
 public:
  Rewriter(const std::string& src, const std::string& name, RewriteMode mode, bool f64 = false)
      : raw_(tokenize(src)), name_(name), mode_(mode), f64_(f64) {
    if (f64_) cuda_f64_retype(raw_);
    for (int i = 0; i < (int)raw_.size(); ++i)
      if (raw_[i].kind != Tk::Space && raw_[i].kind != Tk::Directive) sig_.push_back(i);
    out_.reserve(raw_.size());
    for (const Tok& t : raw_) out_.push_back(t.text);
  }

  RewriteResult run();

 private:
  const std::string& t(int k) const {
    static const std::string empty;
    return k >= 0 && k < (int)sig_.size() ? raw_[sig_[k]].text : empty;
  }
  Tk kind(int k) const { return k >= 0 && k < (int)sig_.size() ? raw_[sig_[k]].kind : Tk::Space; }
  bool member(int k) const { return t(k - 1) == "." || t(k - 1) == "->" || t(k - 1) == "::"; }
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(ErrorKind::Value, (mode_ == RewriteMode::Cuda ? "[cuda] " : "[metal] ") + name_ + ": " + msg);
  }
  // Replaces significant tokens [a, b] (and what lies between) by `text`, keeping the newlines.
  void replace(int a, int b, const std::string& text) {
    std::string nl;
    for (int r = sig_[a]; r <= sig_[b]; ++r) {
      for (char c : raw_[r].text)
        if (c == '\n') nl += '\n';
      out_[r].clear();
    }
    out_[sig_[a]] = text + nl;
  }
  std::string source_text(int a, int b) const {  // original text of significant tokens [a, b)
    std::string s;
    for (int k = a; k < b; ++k) s += (s.empty() ? "" : " ") + t(k);
    return s;
  }
  std::string output_text(int a, int b) const {  // rewritten text of [a, b), newlines folded
    std::string s;
    if (a >= b) return s;
    for (int r = sig_[a]; r < (b < (int)sig_.size() ? sig_[b] : (int)raw_.size()); ++r)
      for (char c : out_[r]) s += c == '\n' ? ' ' : c;
    return s;
  }
  int match(int k, const char* open, const char* close) const {  // index of the token closing t(k)
    int depth = 0;
    for (int j = k; j < (int)sig_.size(); ++j) {
      if (t(j) == open) ++depth;
      if (t(j) == close && --depth == 0) return j;
    }
    fail(std::string("unbalanced '") + open + "'");
  }
  int attribute(int k);
  bool in_kernel_params(int k) const {
    for (const auto& [a, b] : kernel_params_)
      if (k > a && k < b) return true;
    return false;
  }
  void address_space(int& k);
  void threadgroup_var(int& k);
  void literal(int k);
  void swizzle(int k);
  void kernel_definition(int k, bool is_template, const std::string& host_name);
  void note_ref_params(int open, int close);
  void ref_address(int k);
  void instantiation(int& k);
  std::vector<Param> params(const KernelSite& ks) const;
  std::string wrappers(bool uses_sync) const;
  // Cuda mode (rewrite_cuda.cpp): struct sizes, line markers, the __global__ entries.
  void cuda_structs();
  static void cuda_f64_retype(std::vector<Tok>& raw);
  uint32_t cuda_sizeof(const std::string& type, uint32_t* align) const;
  std::string cuda_directive(const std::string& d) const;
  std::string cuda_wrappers(RewriteResult& res);
  const Attr* attr_at(int k) const {
    for (const Attr& a : attrs_)
      if (k >= a.begin && k < a.end) return &a;
    return nullptr;
  }

  std::vector<Tok> raw_;
  std::vector<int> sig_;
  std::vector<std::string> out_;
  std::string name_;
  RewriteMode mode_;
  bool f64_ = false;  // Cuda mode's float64 variant (cuda_f64_retype)
  std::vector<Attr> attrs_;
  std::vector<KernelSite> kernels_;
  std::vector<std::pair<int, int>> kernel_params_;  // the parameter lists of kernels, (open, close)
  std::map<std::string, TemplateKernel> templates_;
  int template_start_ = -1;
  std::set<int> function_constants_;
  // The kernels' `device T& x [[buffer(n)]]` / `constant T& x` parameters, by body: name -> n.
  struct RefScope {
    int begin, end;  // the body's braces
    std::map<std::string, unsigned long> buffer;
  };
  std::vector<RefScope> ref_scopes_;
  std::map<int, std::string> after_;  // text emitted after a raw token (closes what ref_address opened)
  int depth_ = 0;
  int template_end_ = -2;  // index of the '>' that closed the last `template <...>`
  int tg_sites_ = 0;
  std::string pending_host_name_;
  bool pending_kernel_ = false;
  std::vector<int> instantiations_;  // Cuda mode: `template [[host_name]] ...;` statements, dropped
  std::map<std::string, std::pair<uint32_t, uint32_t>> struct_layout_;  // Cuda: name -> (size, align)
  std::map<std::string, long> int_consts_;  // Cuda: namespace-scope integer constants (array sizes)
};


}  // namespace ember::metal::emu::rw
