// The emulator's kernel compiler: preprocess, rewrite, compile with the system C++ compiler, cache, dlopen.
#include "metal/emu/compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "error.h"
#include "metal/embedded.h"
#include "metal/emu/rewrite.h"
#include "metal/emu/runtime.h"

extern char** environ;

namespace ember::metal::emu {
namespace {

// Bumped when the rewriter's output changes meaning, so stale cached modules are never loaded.
constexpr const char* kRewriterVersion = "emu-rewrite-3";

// The headers a plain MSL source may include; the shim is force-included instead.
const char* kStdHeaders[] = {"metal_stdlib", "metal_math", "metal_simdgroup", "metal_atomic", "metal_compute",
                             "metal_integer", "metal_common", "metal_relational", "metal_geometric",
                             "metal_numeric", "metal_types", "metal_pack", "metal_simdgroup_matrix"};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<const Module>> g_modules;
std::atomic<uint64_t> g_compiles{0}, g_disk_hits{0}, g_memory_hits{0};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  EMBER_CHECK(f.good(), Value, "[metal] cannot write ", path);
}
void mkdirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
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

// Runs argv with stdout and stderr into `log_path`; returns the exit status (-1 if it could not start).
int run(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The compiler's identity (its --version text), part of every cache key.
const std::string& compiler_id() {
  static const std::string id = [] {
    const std::string log = cache_dir() + "/.cxx-version." + std::to_string(::getpid());
    const int rc = run({compiler(), "--version"}, log);
    std::string text = read_file(log);
    ::unlink(log.c_str());
    EMBER_CHECK(rc == 0, Value, "[metal] the emulator needs a C++ compiler: '", compiler(),
                " --version' failed (set EMBER_METAL_CXX or CXX)");
    return compiler() + "\n" + text;
  }();
  return id;
}

std::string compile_fail(const std::string& label, const std::string& log) {
  return "[metal] compiling " + label + " failed:\n" + log;
}

// Builds the module for `source` into `so_path` (atomically: a temporary directory, then rename).
void build(const std::string& source, const std::string& label, const CompileOptions& opt, const std::string& so_path) {
  static std::atomic<int> counter{0};
  const std::string dir = cache_dir() + "/tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  mkdirs(dir + "/inc");
  write_file(dir + "/inc/msl_cpu.h", shim_text("msl_cpu.h"));
  write_file(dir + "/inc/msl_abi.h", shim_text("msl_abi.h"));
  write_file(dir + "/inc/ember_dtype.h", shim_text("dtype.h"));
  for (const char* h : kStdHeaders) write_file(dir + "/inc/" + h, "");
  std::string src_name = label;
  for (char& c : src_name)
    if (c == '/' || c == ' ') c = '_';
  write_file(dir + "/" + src_name, source);
  const std::string cxx = compiler();
  const std::string log = dir + "/log.txt";
  auto cleanup = [&] {
    const std::string cmd_files[] = {"inc/msl_cpu.h", "inc/msl_abi.h", "inc/ember_dtype.h", src_name, "pre.ii",
                                     "kernel.cpp", "log.txt", "kernel.so"};
    for (const auto& f : cmd_files) ::unlink((dir + "/" + f).c_str());
    for (const char* h : kStdHeaders) ::unlink((dir + "/inc/" + h).c_str());
    ::rmdir((dir + "/inc").c_str());
    ::rmdir(dir.c_str());
  };
  // 1. Preprocess (macros such as an instantiate() helper expand before the rewriter sees the kernels).
  std::vector<std::string> pre = {cxx, "-E", "-x", "c++", "-std=c++17", "-D__METAL_VERSION__=310", "-I", dir + "/inc",
                                  "-o", dir + "/pre.ii", dir + "/" + src_name};
  if (run(pre, log) != 0) {
    const std::string text = read_file(log);
    cleanup();
    throw Error(ErrorKind::Value, compile_fail(label, text));
  }
  RewriteResult rw;
  try {
    rw = rewrite_msl(read_file(dir + "/pre.ii"), label, RewriteMode::Emulate);
  } catch (...) {
    cleanup();
    throw;
  }
  write_file(dir + "/kernel.cpp", rw.text);
  // 2. Compile the rewritten unit against the shim.
  std::vector<std::string> cc = {cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-w", "-fvisibility=hidden",
                                 "-D__METAL_VERSION__=310", "-I", dir + "/inc", "-include", dir + "/inc/msl_cpu.h"};
  if (opt.tsan) {
    cc.push_back("-fsanitize=thread");
    cc.push_back("-g");
  }
  if (opt.gpu_math) {
    // FMA contraction as a GPU compiler may do it (-std=c++17 turns it off by default; x86-64 needs -mfma)
    cc.insert(cc.end(), {"-DMSL_EMU_GPU_MATH=1", "-ffp-contract=fast"});
#if defined(__x86_64__)
    if (__builtin_cpu_supports("fma")) cc.push_back("-mfma");
#endif
  }
  for (const auto& [idx, value] : opt.constants) cc.push_back("-DMSL_FC_" + std::to_string(idx) + "=" + value);
  cc.insert(cc.end(), {"-o", dir + "/kernel.so", dir + "/kernel.cpp"});
  if (run(cc, log) != 0) {
    std::string text = read_file(log);
    // the log names our temporary files; show the source's own name instead
    for (size_t p; (p = text.find(dir + "/")) != std::string::npos;) text.erase(p, dir.size() + 1);
    cleanup();
    throw Error(ErrorKind::Value, compile_fail(label, text));
  }
  const bool ok = ::rename((dir + "/kernel.so").c_str(), so_path.c_str()) == 0;
  cleanup();
  EMBER_CHECK(ok, Value, "[metal] cannot store the compiled kernel in ", so_path, ": ", std::strerror(errno));
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

std::string cache_dir() {
  static const std::string dir = [] {
    std::string d;
    if (const char* e = std::getenv("EMBER_METAL_CACHE"); e && *e) {
      d = e;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
      d = std::string(x) + "/ember/msl-emu";
    } else if (const char* h = std::getenv("HOME"); h && *h) {
      d = std::string(h) + "/.cache/ember/msl-emu";
    } else {
      d = "/tmp/ember-msl-emu-" + std::to_string(::getuid());
    }
    mkdirs(d);
    return d;
  }();
  return dir;
}

Module::Module(void* handle, std::string label) : handle_(handle), label_(std::move(label)) {
  using Init = uint32_t (*)(const msl_abi::Api*);
  using List = const msl_abi::Kernel* (*)(uint32_t*);
  auto init = reinterpret_cast<Init>(::dlsym(handle, "msl_module_init"));
  auto list = reinterpret_cast<List>(::dlsym(handle, "msl_module_kernels"));
  EMBER_CHECK(init && list, Value, "[metal] ", label_, ": the compiled module lacks its entry points");
  EMBER_CHECK(init(runtime_api()) == msl_abi::kVersion, Value, "[metal] ", label_, ": module ABI mismatch");
  kernels_ = list(&count_);
}

const msl_abi::Kernel* Module::find(const std::string& name) const {
  for (uint32_t i = 0; i < count_; ++i)
    if (name == kernels_[i].name) return &kernels_[i];
  return nullptr;
}

std::vector<std::string> Module::names() const {
  std::vector<std::string> n;
  for (uint32_t i = 0; i < count_; ++i) n.push_back(kernels_[i].name);
  return n;
}

std::shared_ptr<const Module> load_module(const std::string& source, const std::string& label,
                                          const CompileOptions& options) {
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string key = digest(std::string(kRewriterVersion) + '\0' + source + '\0' + shim_text("msl_cpu.h") +
                                 '\0' + shim_text("msl_abi.h") + '\0' + shim_text("dtype.h") + '\0' +
                                 options.key() + '\0' + compiler_id());
  if (auto it = g_modules.find(key); it != g_modules.end()) {
    ++g_memory_hits;
    return it->second;
  }
  const std::string so_path = cache_dir() + "/" + key + ".so";
  struct stat st;
  if (::stat(so_path.c_str(), &st) == 0) {
    ++g_disk_hits;
  } else {
    build(source, label, options, so_path);
    ++g_compiles;
  }
  void* h = ::dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  EMBER_CHECK(h != nullptr, Value, "[metal] cannot load the compiled kernel ", so_path, ": ", ::dlerror());
  auto mod = std::make_shared<const Module>(h, label);
  g_modules.emplace(key, mod);
  return mod;
}

CompileStats compile_stats() { return {g_compiles.load(), g_disk_hits.load(), g_memory_hits.load()}; }

}  // namespace ember::metal::emu
