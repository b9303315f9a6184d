// The emulator's kernel compiler: preprocess, rewrite, compile with the system C++ compiler, cache, dlopen.
#include "metal/emu/compiler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "cpu/dispatch.h"
#include "error.h"
#include "kernel_cache.h"
#include "metal/embedded.h"
#include "emu/faults.h"
#include "msl/rewrite.h"
#include "emu/runtime.h"
#include "sha256.h"

namespace ember::metal::emu {
namespace {

// Bumped when the rewriter's output changes meaning, so stale cached modules are never loaded.
constexpr const char* kRewriterVersion = "emu-rewrite-5";

// The headers a plain MSL source may include; the shim is force-included instead.
const char* kStdHeaders[] = {"metal_stdlib", "metal_math", "metal_simdgroup", "metal_atomic", "metal_compute",
                             "metal_integer", "metal_common", "metal_relational", "metal_geometric",
                             "metal_numeric", "metal_types", "metal_pack", "metal_simdgroup_matrix"};

// Guards g_modules only: never held while a kernel compiles (the cache serialises builds per key), and
// taken across fork() so that a child never inherits it locked.
std::mutex g_mu;
std::map<std::string, std::shared_ptr<const Module>> g_modules;
std::atomic<uint64_t> g_compiles{0}, g_disk_hits{0}, g_memory_hits{0};
void fork_prepare() { g_mu.lock(); }
void fork_parent() { g_mu.unlock(); }
const int g_atfork = pthread_atfork(fork_prepare, fork_parent, fork_parent);

kcache::Cache& cache() {
  static auto* c = new kcache::Cache("msl-emu", "EMBER_METAL_CACHE", "metal");  // leaked: modules stay loaded
  return *c;
}

const char* shim_text(const char* name) {
  const char* s = embedded_source(name);
  EMBER_CHECK(s != nullptr, Value, "[metal] this build lacks the embedded ", name);
  return s;
}

std::string compiler() {
  if (const char* c = std::getenv("EMBER_METAL_CXX")) return c;
  if (const char* c = std::getenv("CXX")) return c;
  return "c++";
}

// Whether `cxx` takes `flag` (older clangs lack -fstack-clash-protection); asked once per compiler.
bool takes_flag(const std::string& cxx, const std::string& flag) {
  static std::mutex mu;
  static std::map<std::string, bool> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(cxx + ' ' + flag); it != known.end()) return it->second;
  }
  std::string out;
  const bool ok = kcache::run_command({cxx, flag, "-fsyntax-only", "-x", "c++", "/dev/null"}, &out) == 0;
  std::lock_guard<std::mutex> lock(mu);
  known[cxx + ' ' + flag] = ok;
  return ok;
}

std::string compile_fail(const std::string& label, const std::string& log) {
  return "[metal] compiling " + label + " failed:\n" + log;
}

// Builds the module for `source` in `dir` (a private directory the cache made) into `out`.
void build(const std::string& source, const std::string& label, const CompileOptions& opt, const std::string& dir,
           const std::string& out) {
  ::mkdir((dir + "/inc").c_str(), 0700);
  kcache::write_new_file(dir + "/inc/msl_cpu.h", shim_text("msl_cpu.h"), "metal");
  kcache::write_new_file(dir + "/inc/msl_abi.h", shim_text("msl_abi.h"), "metal");
  kcache::write_new_file(dir + "/inc/ember_dtype.h", shim_text("dtype.h"), "metal");
  for (const char* h : kStdHeaders) kcache::write_new_file(dir + "/inc/" + h, "", "metal");
  std::string src_name = label;
  for (char& c : src_name)
    if (c == '/' || c == ' ') c = '_';
  if (src_name.empty() || src_name[0] == '.') src_name = "k" + src_name;
  kcache::write_new_file(dir + "/" + src_name, source, "metal");
  const std::string cxx = compiler();
  std::string log;
  // 1. Preprocess (macros such as an instantiate() helper expand before the rewriter sees the kernels).
  std::vector<std::string> pre = {cxx, "-E", "-x", "c++", "-std=c++17", "-D__METAL_VERSION__=310", "-I", dir + "/inc",
                                  "-o", dir + "/pre.ii", dir + "/" + src_name};
  if (kcache::run_command(pre, &log) != 0) throw Error(ErrorKind::Value, compile_fail(label, log));
  std::string pre_text;
  EMBER_CHECK(kcache::read_file_nofollow(dir + "/pre.ii", &pre_text), Value, "[metal] compiling ", label,
              ": the preprocessor wrote no output");
  RewriteResult rw = rewrite_msl(pre_text, label, RewriteMode::Emulate);
  kcache::write_new_file(dir + "/kernel.cpp", rw.text, "metal");
  // 2. Compile the rewritten unit against the shim.
  std::vector<std::string> cc = {cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-w", "-fvisibility=hidden",
                                 "-D__METAL_VERSION__=310", "-I", dir + "/inc", "-include", dir + "/inc/msl_cpu.h"};
  // A large per-thread array probes its stack page by page, so it meets the fiber's guard page (an
  // error, faults.h) instead of stepping over it into other memory.
  if (takes_flag(cxx, "-fstack-clash-protection")) cc.push_back("-fstack-clash-protection");
  if (opt.tsan) {
    cc.push_back("-fsanitize=thread");
    cc.push_back("-g");
  }
  if (opt.gpu_math) {
    // FMA contraction as a GPU compiler may do it (-std=c++17 turns it off by default; x86-64 needs -mfma)
    cc.insert(cc.end(), {"-DMSL_EMU_GPU_MATH=1", "-ffp-contract=fast"});
    if (cpu::host_has_fma()) cc.push_back("-mfma");  // cpuid, not __builtin_cpu_supports (see dispatch.cpp)
  }
  for (const auto& [idx, value] : opt.constants) cc.push_back("-DMSL_FC_" + std::to_string(idx) + "=" + value);
  cc.insert(cc.end(), {"-o", out, dir + "/kernel.cpp"});
  if (kcache::run_command(cc, &log) != 0) {
    // the log names our temporary files; show the source's own name instead
    for (size_t p; (p = log.find(dir + "/")) != std::string::npos;) log.erase(p, dir.size() + 1);
    throw Error(ErrorKind::Value, compile_fail(label, log));
  }
}

}  // namespace

std::string CompileOptions::key() const {
  std::string k = tsan ? "tsan;" : "plain;";
  if (gpu_math) k += "gpumath;";
  for (const auto& [i, v] : constants) k += std::to_string(i) + "=" + v + ";";
  return k;
}

std::string digest(const std::string& data) {
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (unsigned char c : data) {
    h1 = (h1 ^ c) * 0x100000001b3ull;
    h2 = (h2 ^ c) * 0x100000001b3ull;
    h2 ^= h2 >> 29;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
  return buf;
}

std::string cache_dir() { return cache().dir(); }

std::shared_ptr<const Module> load_module(const std::string& source, const std::string& label,
                                          const CompileOptions& options) {
  (void)g_atfork;
  static const std::string shims = sha256_hex(std::string(shim_text("msl_cpu.h")) + '\0' + shim_text("msl_abi.h") +
                                              '\0' + shim_text("dtype.h"));
  const std::string cxx_id =
      kcache::compiler_identity(compiler(), "metal", "the MSL emulator compiles kernels with it; set EMBER_METAL_CXX or CXX");
  const std::string key = sha256_hex(std::string(kRewriterVersion) + '\0' + source + '\0' + shims + '\0' +
                                     options.key() + '\0' + cxx_id);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_modules.find(key); it != g_modules.end()) {
      ++g_memory_hits;
      return it->second;
    }
  }
  const kcache::Cache::Loaded got = cache().load_so(key, [&](const std::string& dir, const std::string& out) {
    build(source, label, options, dir, out);
  });
  (got.source == kcache::Cache::Loaded::Built ? g_compiles : got.source == kcache::Cache::Loaded::Disk ? g_disk_hits
                                                                                                       : g_memory_hits)++;
  std::lock_guard<std::mutex> lock(g_mu);
  auto [it, fresh] = g_modules.emplace(key, nullptr);
  if (fresh) {
    register_kernel_code(got.handle);
    it->second = std::make_shared<const Module>(got.handle, label, "metal");
  }
  return it->second;
}

CompileStats compile_stats() { return {g_compiles.load(), g_disk_hits.load(), g_memory_hits.load()}; }

}  // namespace ember::metal::emu
