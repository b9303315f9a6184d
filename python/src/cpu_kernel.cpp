// Binding of em.cpu.Kernel: a user's C++ source compiled at first use with the system compiler into a shared
// object stored in the kernel cache (cpp/kernel_cache.h), called with the inputs', outputs' and scalars' data.
// Arguments are checked against the declared signature by python/ember/cpu_kernel.py first; what is checked
// again here (kinds, bounds of every layout) guards the C++ side, so a wrong call raises instead of crashing.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "kernel_cache.h"

namespace ember::bind {
namespace {

// The ABI between ember and a compiled kernel (mirrored in the prelude of cpu_kernel.py; bump
// kAbi in both when a field changes: it is part of every cache key).
struct KTensor {
  void* data;
  int64_t ndim;
  const int64_t* shape;
  const int64_t* strides;
  int64_t offset;
  int64_t numel;
  int32_t dtype;
  int32_t itemsize;
};
struct KScalar {
  int32_t is_float;
  int64_t i;
  double f;
};
using KTask = void (*)(void* ctx, int64_t begin, int64_t end);
struct KArgs {
  int32_t n_inputs, n_outputs, n_scalars;
  const KTensor* inputs;
  const KTensor* outputs;
  const KScalar* scalars;
  void (*parallel_for)(int64_t n, int64_t grain, KTask fn, void* ctx);
};
using KEntry = int (*)(const KArgs* args, char* err, size_t err_size);

void pool_for(int64_t n, int64_t grain, KTask fn, void* ctx) {
  cpu::parallel_for(n, grain < 1 ? 1 : grain, [fn, ctx](int64_t b, int64_t e) { fn(ctx, b, e); });
}

kcache::Cache& cache() { return cpu_kernel_cache(); }

const char* kHint =
    "em.cpu.Kernel compiles C++ with the system compiler ($CXX, else c++): install one, e.g. `apt-get install "
    "g++` (Debian/Ubuntu), `dnf install gcc-c++` (Fedora), or `xcode-select --install` (macOS)";

struct Loaded {
  KEntry entry;
  std::string source;  // "memory", "disk" or "built"
};

// Compiles (or finds in the cache) `code`, whose entry point is `entry`, with `flags`.
Loaded load(const std::string& code, const std::string& entry, const std::vector<std::string>& flags,
            const std::string& cxx_in, const std::string& abi) {
  const std::string cxx = cxx_in.empty() ? "c++" : cxx_in;
  const std::string ident = kcache::compiler_identity(cxx, "cpu.Kernel", kHint);
  std::string key = abi + "\n" + ident + "\n" + entry + "\n";
  for (const auto& f : flags) key += f + "\n";
  key += code;
  auto got = cache().load_so(key, [&](const std::string& dir, const std::string& out) {
    const std::string src = dir + "/kernel.cpp";
    kcache::write_new_file(src, code, "cpu.Kernel");
    std::vector<std::string> argv = {cxx, "-shared", "-fPIC", "-fvisibility=hidden"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"-o", out, src});
    std::string log;
    const int rc = kcache::run_command(argv, &log);
    if (rc != 0)
      throw Error(ErrorKind::Value, "[cpu.Kernel] compiling " + entry + " failed (" + cxx + " exited with " +
                                        std::to_string(rc) + "):\n" + log);
  });
  void* sym = dlsym(got.handle, entry.c_str());
  EMBER_CHECK(sym != nullptr, Value, "[cpu.Kernel] the compiled kernel has no entry point ", entry);
  const char* src = got.source == kcache::Cache::Loaded::Memory ? "memory"
                    : got.source == kcache::Cache::Loaded::Disk ? "disk" : "built";
  return {reinterpret_cast<KEntry>(sym), src};
}

struct Arg {
  std::shared_ptr<BackendStorage> storage;
  Layout layout;
};

KTensor describe(const Arg& a, const char* what, size_t i) {
  EMBER_CHECK(a.storage != nullptr, Type, "[cpu.Kernel] ", what, "[", i, "] is None");
  auto* cs = dynamic_cast<cpu::CpuStorage*>(a.storage.get());
  EMBER_CHECK(cs != nullptr, Device, "[cpu.Kernel] ", what, "[", i, "] is a storage on ", a.storage->device().str(),
              ", expected a CpuStorage");
  const Layout& l = a.layout;
  if (l.numel() > 0) {
    const auto [lo, hi] = l.extent();
    EMBER_CHECK(lo >= 0 && hi <= cs->numel(), Value, "[cpu.Kernel] ", what, "[", i, "]'s layout reaches elements [",
                lo, ", ", hi, ") of a storage of ", cs->numel());
  }
  return KTensor{cs->raw(), l.ndim(), l.shape().data(), l.stride().data(), l.offset(), l.numel(),
                 (int32_t)cs->dtype(), (int32_t)itemsize(cs->dtype())};
}

void call(std::uintptr_t fn, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs,
          const std::vector<KScalar>& scalars, const std::string& name) {
  std::vector<KTensor> in, out;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(describe(inputs[i], "inputs", i));
  for (size_t i = 0; i < outputs.size(); ++i) out.push_back(describe(outputs[i], "outputs", i));
  KArgs args{(int32_t)in.size(), (int32_t)out.size(), (int32_t)scalars.size(), in.data(), out.data(),
             scalars.data(), &pool_for};
  char err[2048] = {0};
  int rc;
  {
    py::gil_scoped_release release;
    rc = reinterpret_cast<KEntry>(fn)(&args, err, sizeof(err) - 1);
  }
  for (const auto& o : outputs) o.storage->bump_version();  // written (a saved tensor's backward raises)
  EMBER_CHECK(rc == 0, Value, "[", name, "] the kernel raised: ", err[0] ? err : "an unknown C++ exception");
}

}  // namespace

void bind_cpu_kernel(py::module_& m) {
  m.def("_cpu_kernel_load",
        [](const std::string& code, const std::string& entry, const std::vector<std::string>& flags,
           const std::string& cxx, const std::string& abi) {
          Loaded l = load(code, entry, flags, cxx, abi);
          return py::make_tuple(reinterpret_cast<std::uintptr_t>(l.entry), l.source);
        },
        py::arg("code"), py::arg("entry"), py::arg("flags"), py::arg("cxx"), py::arg("abi"));
  m.def("_cpu_kernel_call",
        [](std::uintptr_t fn, const std::vector<std::pair<std::shared_ptr<BackendStorage>, Layout>>& inputs,
           const std::vector<std::pair<std::shared_ptr<BackendStorage>, Layout>>& outputs,
           const std::vector<std::tuple<bool, int64_t, double>>& scalars, const std::string& name) {
          std::vector<Arg> in, out;
          for (const auto& [s, l] : inputs) in.push_back({s, l});
          for (const auto& [s, l] : outputs) out.push_back({s, l});
          std::vector<KScalar> sc;
          for (const auto& [isf, i, f] : scalars) sc.push_back({isf ? 1 : 0, i, f});
          call(fn, in, out, sc, name);
        },
        py::arg("fn"), py::arg("inputs"), py::arg("outputs"), py::arg("scalars"), py::arg("name"));
}

}  // namespace ember::bind
