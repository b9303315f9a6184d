// NVRTC through dlopen: CUDA C++ -> PTX on any machine where PyPI's nvidia-cuda-nvrtc is installed (no GPU
// or driver needed). The library's path comes from Python, which finds it among the package's files.
#include <dirent.h>
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>

#include "cuda/adapter.h"
#include "error.h"

namespace ember::cuda {
namespace {

// The few NVRTC entry points ember calls, declared here (no CUDA headers at build time).
using nvrtcProgram = void*;
struct Nvrtc {
  int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  int (*compile)(nvrtcProgram, int, const char* const*);
  int (*log_size)(nvrtcProgram, size_t*);
  int (*log)(nvrtcProgram, char*);
  int (*ptx_size)(nvrtcProgram, size_t*);
  int (*ptx)(nvrtcProgram, char*);
  int (*destroy)(nvrtcProgram*);
  const char* (*error)(int);
  int (*version)(int*, int*);
  int (*add_name)(nvrtcProgram, const char*);
  int (*lowered_name)(nvrtcProgram, const char*, const char**);
};

// NVRTC dlopens libnvrtc-builtins by name through its own RUNPATH; a dlopen interceptor (ASan's) hides that
// RUNPATH. Loaded first by full path from the same directory, the builtins are then found by their soname.
void preload_builtins(const std::string& library) {
  const size_t slash = library.rfind('/');
  if (slash == std::string::npos) return;
  const std::string dir = library.substr(0, slash);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "libnvrtc-builtins.so", 20) == 0)
      ::dlopen((dir + "/" + e->d_name).c_str(), RTLD_NOW | RTLD_LOCAL);  // a failure shows in NVRTC's own error
  }
  ::closedir(d);
}

const Nvrtc& load(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, Nvrtc> loaded;  // never unloaded
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(library); it != loaded.end()) return it->second;
  preload_builtins(library);
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  EMBER_CHECK(h != nullptr, Value, "[cuda] cannot load NVRTC from ", library, ": ", ::dlerror());
  Nvrtc n{};
  auto sym = [&](const char* name) {
    void* p = ::dlsym(h, name);
    EMBER_CHECK(p != nullptr, Value, "[cuda] ", library, " lacks ", name, " (not an NVRTC library?)");
    return p;
  };
  n.create = reinterpret_cast<decltype(n.create)>(sym("nvrtcCreateProgram"));
  n.compile = reinterpret_cast<decltype(n.compile)>(sym("nvrtcCompileProgram"));
  n.log_size = reinterpret_cast<decltype(n.log_size)>(sym("nvrtcGetProgramLogSize"));
  n.log = reinterpret_cast<decltype(n.log)>(sym("nvrtcGetProgramLog"));
  n.ptx_size = reinterpret_cast<decltype(n.ptx_size)>(sym("nvrtcGetPTXSize"));
  n.ptx = reinterpret_cast<decltype(n.ptx)>(sym("nvrtcGetPTX"));
  n.destroy = reinterpret_cast<decltype(n.destroy)>(sym("nvrtcDestroyProgram"));
  n.error = reinterpret_cast<decltype(n.error)>(sym("nvrtcGetErrorString"));
  n.version = reinterpret_cast<decltype(n.version)>(sym("nvrtcVersion"));
  n.add_name = reinterpret_cast<decltype(n.add_name)>(sym("nvrtcAddNameExpression"));
  n.lowered_name = reinterpret_cast<decltype(n.lowered_name)>(sym("nvrtcGetLoweredName"));
  return loaded.emplace(library, n).first->second;
}

}  // namespace

std::string nvrtc_ptx(const std::string& library, const std::string& source, const std::string& label,
                      const std::vector<std::string>& options, const std::string& arch,
                      const std::vector<std::string>& kernels, std::vector<std::string>* lowered) {
  const Nvrtc& n = load(library);
  nvrtcProgram prog = nullptr;
  int rc = n.create(&prog, source.c_str(), label.c_str(), 0, nullptr, nullptr);
  EMBER_CHECK(rc == 0, Value, "[cuda] nvrtcCreateProgram failed: ", n.error(rc));
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Destroy() { n.destroy(p); }
  } destroy{n, &prog};
  for (const std::string& k : kernels) n.add_name(prog, ("&" + k).c_str());  // their mangled names, after
  std::vector<std::string> opts = {"--gpu-architecture=" + arch};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  rc = n.compile(prog, (int)argv.size(), argv.data());
  size_t log_size = 0;
  n.log_size(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) n.log(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  EMBER_CHECK(rc == 0, Value, "[cuda] compiling ", label, " failed (NVRTC, ", arch, "):\n", log);
  size_t size = 0;
  n.ptx_size(prog, &size);
  std::string ptx(size, '\0');
  n.ptx(prog, ptx.data());
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  if (lowered) {
    lowered->clear();
    for (const std::string& k : kernels) {
      const char* m = nullptr;
      n.lowered_name(prog, ("&" + k).c_str(), &m);
      lowered->push_back(m ? m : k);
    }
  }
  return ptx;
}

std::string nvrtc_version(const std::string& library) {
  int major = 0, minor = 0;
  load(library).version(&major, &minor);
  return cat_str(major, ".", minor);
}

}  // namespace ember::cuda
