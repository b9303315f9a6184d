// The CUDA emulator's adapter: device memory is host memory (256-byte aligned, as cudaMalloc's), a module
// is the user's source rewritten (cuda_source.cpp) and built by the system compiler against cuda/cuda_emu.h,
// cached on disk (kernel_cache.h), and a launch runs on the emulators' shared runtime (cpp/emu/) at once.
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda/adapter.h"
#include "cuda/cuda_source.h"
#include "cuda/embedded.h"
#include "emu/faults.h"
#include "emu/module.h"
#include "emu/runtime.h"
#include "error.h"
#include "kernel_cache.h"
#include "sha256.h"

namespace ember::cuda {
namespace {

// Bumped when the rewrite's output changes meaning, so stale cached modules are never loaded.
constexpr const char* kRewriteVersion = "cuda-emu-1";
constexpr uint64_t kSharedLimit = 48 * 1024;  // CUDA's per-block static + dynamic limit without opt-in
// The headers a CUDA source may include; the shim is force-included instead.
const char* kStdHeaders[] = {"cuda_runtime.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "device_launch_parameters.h",
                             "cuda_runtime_api.h", "math_constants.h", "stdint.h"};

const char* shim_text(const char* name) {
  const char* s = embedded_source(name);
  EMBER_CHECK(s != nullptr, Value, "[cuda] this build lacks the embedded ", name);
  return s;
}

std::string compiler() {
  if (const char* c = std::getenv("EMBER_CUDA_CXX")) return c;
  if (const char* c = std::getenv("CXX")) return c;
  return "c++";
}

kcache::Cache& cache() {
  static auto* c = new kcache::Cache("cuda-emu", "EMBER_CUDA_CACHE", "cuda");  // leaked: modules stay loaded
  return *c;
}

void build(const ParsedSource& p, const std::string& label, const std::vector<std::string>& options,
           const std::string& dir, const std::string& out) {
  ::mkdir((dir + "/inc").c_str(), 0700);
  kcache::write_new_file(dir + "/inc/cuda_emu.h", shim_text("cuda_emu.h"), "cuda");
  kcache::write_new_file(dir + "/inc/msl_abi.h", shim_text("msl_abi.h"), "cuda");
  kcache::write_new_file(dir + "/inc/ember_dtype.h", shim_text("dtype.h"), "cuda");
  for (const char* h : kStdHeaders)
    if (std::strcmp(h, "stdint.h") != 0) kcache::write_new_file(dir + "/inc/" + h, "", "cuda");
  kcache::write_new_file(dir + "/kernel.cpp", p.emu_unit, "cuda");
  std::vector<std::string> cc = {compiler(), "-std=c++17", "-O2", "-fPIC", "-shared", "-w", "-fvisibility=hidden",
                                 "-fno-strict-aliasing", "-I", dir + "/inc", "-include", dir + "/inc/cuda_emu.h"};
  for (const std::string& o : options) cc.push_back(o);  // -D / -U only (checked by the caller)
  cc.insert(cc.end(), {"-o", out, dir + "/kernel.cpp"});
  std::string log;
  if (kcache::run_command(cc, &log) != 0) {
    for (size_t q; (q = log.find(dir + "/")) != std::string::npos;) log.erase(q, dir.size() + 1);
    throw Error(ErrorKind::Value, "[cuda] compiling " + label + " failed:\n" + log);
  }
}

std::atomic<uint64_t> g_records{0}, g_waits{0}, g_destroys{0}, g_syncs{0};

// The emulator's event: which device's stream recorded it (every launch has run by then, so it is complete).
struct EmuEvent {
  int dev;
};

struct EmuModule {
  std::shared_ptr<const emu::Module> module;
};

class EmuAdapter final : public Adapter {
 public:
  const char* kind() const override { return "emulator"; }
  int device_count() override { return 1; }
  std::string device_name(int) override { return "ember CUDA emulator (CPU)"; }
  std::string arch(int) override { return "emulated"; }
  uint32_t max_threads_per_block(int) override { return emu::kMaxThreadsPerGroup; }
  uint64_t max_shared_per_block(int) override { return kSharedLimit; }
  uint64_t total_memory(int) override { return 0; }

  uint64_t alloc(int, size_t bytes) override {
    // Rounded up to whole 256-byte lines: a kernel's accesses are checked against the storage's own
    // extent, never against this allocation.
    void* p = nullptr;
    EMBER_CHECK(::posix_memalign(&p, 256, (bytes + 255) / 256 * 256 + 256) == 0, Memory, "[cuda] the emulator cannot allocate ", bytes, " bytes");
    return (uint64_t)(uintptr_t)p;
  }
  void free(int, uint64_t dptr) override { std::free((void*)(uintptr_t)dptr); }
  void copy_to_device(int, uint64_t dst, const void* src, size_t n) override {
    if (n) std::memcpy((void*)(uintptr_t)dst, src, n);
  }
  void copy_to_host(int, void* dst, uint64_t src, size_t n) override {
    if (n) std::memcpy(dst, (const void*)(uintptr_t)src, n);
  }
  void copy_on_device(int, uint64_t dst, uint64_t src, size_t n) override {
    if (n) std::memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  }

  ModuleHandle load_module(int, const std::string& source, const std::string& label,
                           const std::vector<std::string>& options) override {
    static const std::string shims = sha256_hex(std::string(shim_text("cuda_emu.h")) + '\0' + shim_text("msl_abi.h") +
                                                '\0' + shim_text("dtype.h"));
    const std::string cxx_id = kcache::compiler_identity(
        compiler(), "cuda", "the CUDA emulator compiles kernels with it; set EMBER_CUDA_CXX or CXX");
    std::string opts;
    for (const std::string& o : options) opts += o + '\n';
    const ParsedSource p = parse_source(source, label);
    // The rewritten unit (the source, the label in its #line and the generated entries) is the key's text.
    const std::string key = sha256_hex(std::string(kRewriteVersion) + '\0' + p.emu_unit + '\0' + shims + '\0' + opts +
                                       '\0' + cxx_id);
    std::lock_guard<std::mutex> lock(mu_);  // one build per key at a time is the cache's; this guards modules_
    if (auto it = modules_.find(key); it != modules_.end()) return {it->second.get()};
    const kcache::Cache::Loaded got =
        cache().load_so(key, [&](const std::string& dir, const std::string& out) { build(p, label, options, dir, out); });
    auto m = std::make_unique<EmuModule>();
    emu::register_kernel_code(got.handle);
    m->module = std::make_shared<const emu::Module>(got.handle, label, "cuda");
    ModuleHandle h{m.get()};
    modules_.emplace(key, std::move(m));
    return h;
  }

  void launch(int, ModuleHandle module, const std::string& function, Dim3 grid, Dim3 block, uint32_t shared_mem,
              const std::vector<LaunchArg>& args) override {
    const EmuModule& m = *static_cast<const EmuModule*>(module.p);
    const msl_abi::Kernel* k = m.module->find(function);
    EMBER_CHECK(k != nullptr, Value, "[cuda] ", m.module->label(), " has no kernel '", function, "'");
    emu::Launch L;
    L.kernel = k;
    L.dialect = &emu::kCudaDialect;
    L.label = m.module->label();
    L.group_memory_limit = kSharedLimit;
    L.max_group_threads = emu::kMaxThreadsPerGroup;
    for (const LaunchArg& a : args)
      L.buffers.push_back(a.pointer ? msl_abi::Buffer{(char*)(uintptr_t)a.dptr, a.extent}
                                    : msl_abi::Buffer{const_cast<char*>(a.bytes.data()), a.bytes.size()});
    L.threadgroup_mem = {shared_mem};
    const uint32_t g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
    for (int d = 0; d < 3; ++d) {
      const uint64_t threads = (uint64_t)g[d] * b[d];
      EMBER_CHECK(threads <= 0xffffffffull, Value, "[cuda] kernel '", function, "': the emulator runs at most 2^32 - 1 "
                  "threads along each dimension; the grid has ", threads);
      L.grid[d] = (uint32_t)threads;
      L.group[d] = b[d];
    }
    emu::run_launch(L);
  }
  void synchronize(int) override { ++g_syncs; }  // launches and copies have run when they return
  // Every launch has run when it returns, so an event is complete when recorded and a wait is satisfied at
  // once; they are still real calls, so the host code's path is the driver's.
  EventHandle record_event(int dev) override {
    ++g_records;
    return {new EmuEvent{dev}};
  }
  void stream_wait_event(int dev, uint64_t stream, EventHandle event) override {
    EMBER_CHECK(event && static_cast<EmuEvent*>(event.p)->dev == dev && stream != 0, Value,
                "[cuda] stream wait on an event of another device or on stream 0");
    ++g_waits;
  }
  void destroy_event(int, EventHandle event) override {
    delete static_cast<EmuEvent*>(event.p);
    ++g_destroys;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<EmuModule>> modules_;
};

}  // namespace

EmulatorCounts emulator_counts() { return {g_records.load(), g_waits.load(), g_destroys.load(), g_syncs.load()}; }

Adapter& emulator_adapter() {
  static EmuAdapter* a = new EmuAdapter();  // leaked: kernels may run at exit
  return *a;
}

}  // namespace ember::cuda
