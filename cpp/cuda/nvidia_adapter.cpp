// The driver adapter: libcuda.so.1 through dlopen at first use (so `import ember` works everywhere and a wheel
// needs no CUDA at build time), one primary context per device, its default stream, modules from NVRTC's PTX.
// Written against the driver API's documented signatures; it has NEVER run on a GPU (docs/cuda.md).
#include <dlfcn.h>

#include <map>
#include <mutex>

#include "cuda/adapter.h"
#include "cuda/cuda_source.h"
#include "error.h"

namespace ember::cuda {
namespace {

std::mutex g_lib_mu;
std::string g_nvrtc;

// The driver entry points ember calls (CUresult is int, handles are pointers, CUdeviceptr is 64-bit).
struct Driver {
  int (*init)(unsigned);
  int (*device_get_count)(int*);
  int (*device_get)(int*, int);
  int (*device_get_name)(char*, int, int);
  int (*device_get_attribute)(int*, int, int);
  int (*device_total_mem)(size_t*, int);
  int (*primary_ctx_retain)(void**, int);
  int (*ctx_set_current)(void*);
  int (*mem_alloc)(uint64_t*, size_t);
  int (*mem_free)(uint64_t);
  int (*memcpy_htod)(uint64_t, const void*, size_t);
  int (*memcpy_dtoh)(void*, uint64_t, size_t);
  int (*memcpy_dtod)(uint64_t, uint64_t, size_t);
  int (*module_load_data)(void**, const void*);
  int (*module_get_function)(void**, void*, const char*);
  int (*func_get_attribute)(int*, int, void*);
  int (*launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**);
  int (*ctx_synchronize)();
  int (*event_create)(void**, unsigned);
  int (*event_record)(void*, void*);
  int (*stream_wait_event)(void*, void*, unsigned);
  int (*event_destroy)(void*);
  int (*get_error_string)(int, const char**);
};
// CUdevice_attribute values used below.
constexpr int kMaxThreadsPerBlock = 1, kMaxSharedPerBlock = 8, kCcMajor = 75, kCcMinor = 76;
constexpr int kFuncMaxThreadsPerBlock = 0;  // CUfunction_attribute
constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING

struct NvModule {
  void* module = nullptr;
  std::map<std::string, std::string> lowered;  // kernel name -> mangled name
};

class NvidiaAdapter final : public Adapter {
 public:
  explicit NvidiaAdapter(const Driver& d, int count) : d_(d), count_(count), ctx_(count, nullptr) {}
  const char* kind() const override { return "nvidia"; }
  int device_count() override { return count_; }
  std::string device_name(int dev) override {
    char name[256] = {};
    check(d_.device_get_name(name, sizeof name, dev), "cuDeviceGetName");
    return name;
  }
  std::string arch(int dev) override { return cat_str("sm_", attr(dev, kCcMajor), attr(dev, kCcMinor)); }
  uint32_t max_threads_per_block(int dev) override { return (uint32_t)attr(dev, kMaxThreadsPerBlock); }
  uint64_t max_shared_per_block(int dev) override { return (uint64_t)attr(dev, kMaxSharedPerBlock); }
  uint64_t total_memory(int dev) override {
    size_t n = 0;
    check(d_.device_total_mem(&n, dev), "cuDeviceTotalMem");
    return n;
  }
  uint64_t alloc(int dev, size_t bytes) override {
    use(dev);
    uint64_t p = 0;
    const int rc = d_.mem_alloc(&p, bytes ? bytes : 1);
    EMBER_CHECK(rc == 0, Memory, "[cuda] cuda:", dev, " cannot allocate ", bytes, " bytes (", err(rc), ")");
    return p;
  }
  void free(int dev, uint64_t dptr) override {
    use(dev);
    d_.mem_free(dptr);
  }
  void copy_to_device(int dev, uint64_t dst, const void* src, size_t n) override {
    use(dev);
    if (n) check(d_.memcpy_htod(dst, src, n), "cuMemcpyHtoD");
  }
  void copy_to_host(int dev, void* dst, uint64_t src, size_t n) override {
    use(dev);
    if (n) check(d_.memcpy_dtoh(dst, src, n), "cuMemcpyDtoH");  // synchronous: waits for the stream's work
  }
  void copy_on_device(int dev, uint64_t dst, uint64_t src, size_t n) override {
    use(dev);
    if (n) check(d_.memcpy_dtod(dst, src, n), "cuMemcpyDtoD");
  }
  ModuleHandle load_module(int dev, const std::string& source, const std::string& label,
                           const std::vector<std::string>& options) override {
    const std::string lib = nvrtc_library();
    EMBER_CHECK(!lib.empty(), Value, "[cuda] compiling ", label, " needs NVRTC: pip install nvidia-cuda-nvrtc");
    const ParsedSource p = parse_source(source, label);
    std::vector<std::string> names, lowered;
    for (const KernelDecl& k : p.kernels)
      if (!k.is_template) names.push_back(k.name);
    const std::string ptx = nvrtc_ptx(lib, source, label, options, arch(dev), names, &lowered);
    use(dev);
    auto m = new NvModule();  // kept for the life of the process, as the emulator's modules are
    check(d_.module_load_data(&m->module, ptx.c_str()), "cuModuleLoadData");
    for (size_t i = 0; i < names.size(); ++i) m->lowered[names[i]] = lowered[i];
    return {m};
  }
  uint32_t max_threads(int dev, ModuleHandle module, const std::string& function) override {
    use(dev);
    int v = 0;
    check(d_.func_get_attribute(&v, kFuncMaxThreadsPerBlock, get_function(module, function)), "cuFuncGetAttribute");
    return (uint32_t)v;
  }
  void launch(int dev, ModuleHandle module, const std::string& function, Dim3 grid, Dim3 block, uint32_t shared_mem,
              const std::vector<LaunchArg>& args) override {
    use(dev);
    void* fn = get_function(module, function);
    std::vector<uint64_t> ptrs(args.size());
    std::vector<void*> params(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      ptrs[i] = args[i].dptr;
      params[i] = args[i].pointer ? (void*)&ptrs[i] : (void*)args[i].bytes.data();
    }
    check(d_.launch_kernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_mem, nullptr, params.data(),
                           nullptr),
          "cuLaunchKernel");
  }
  bool gemm(int dev, const RowMajorGemm& g) override {
    if (cublas_library().empty()) return false;
    use(dev);
    cublas_gemm(dev, g);
    return true;
  }
  void synchronize(int dev) override {
    use(dev);
    check(d_.ctx_synchronize(), "cuCtxSynchronize (a kernel failed)");
  }
  EventHandle record_event(int dev) override {
    use(dev);
    void* ev = nullptr;
    check(d_.event_create(&ev, kEventDisableTiming), "cuEventCreate");
    const int rc = d_.event_record(ev, nullptr);  // the legacy default stream, which ember launches on
    if (rc != 0) {
      d_.event_destroy(ev);
      check(rc, "cuEventRecord");
    }
    return {ev};
  }
  void stream_wait_event(int dev, uint64_t stream, EventHandle event) override {
    use(dev);
    check(d_.stream_wait_event((void*)(uintptr_t)stream, event.p, 0), "cuStreamWaitEvent");
  }
  void destroy_event(int dev, EventHandle event) override {
    use(dev);
    check(d_.event_destroy(event.p), "cuEventDestroy");  // a pending event is freed once it completes
  }

 private:
  std::string err(int rc) const {
    const char* s = nullptr;
    d_.get_error_string(rc, &s);
    return s ? s : cat_str("CUresult ", rc);
  }
  void check(int rc, const char* what) const {
    EMBER_CHECK(rc == 0, Device, "[cuda] ", what, " failed: ", err(rc));
  }
  void* get_function(ModuleHandle module, const std::string& function) {
    const NvModule& m = *static_cast<const NvModule*>(module.p);
    auto it = m.lowered.find(function);
    const std::string& mangled = it == m.lowered.end() ? function : it->second;
    void* fn = nullptr;
    check(d_.module_get_function(&fn, m.module, mangled.c_str()), "cuModuleGetFunction");
    return fn;
  }
  int attr(int dev, int a) {
    int v = 0;
    check(d_.device_get_attribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  }
  // Makes dev's primary context current on this thread (retained once, at first use).
  void use(int dev) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_[dev]) check(d_.primary_ctx_retain(&ctx_[dev], dev), "cuDevicePrimaryCtxRetain");
    check(d_.ctx_set_current(ctx_[dev]), "cuCtxSetCurrent");
  }
  Driver d_;
  int count_;
  std::mutex mu_;
  std::vector<void*> ctx_;
};

}  // namespace

void set_nvrtc_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_lib_mu);
  g_nvrtc = path;
}

std::string nvrtc_library() {
  std::lock_guard<std::mutex> lock(g_lib_mu);
  return g_nvrtc;
}

Adapter* nvidia_adapter(std::string* why) {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    *why = "no NVIDIA driver (libcuda.so.1 not found)";
    return nullptr;
  }
  Driver d{};
  bool ok = true;
  auto sym = [&](const char* name) {
    void* p = ::dlsym(h, name);
    ok = ok && p != nullptr;
    return p;
  };
  d.init = reinterpret_cast<decltype(d.init)>(sym("cuInit"));
  d.device_get_count = reinterpret_cast<decltype(d.device_get_count)>(sym("cuDeviceGetCount"));
  d.device_get = reinterpret_cast<decltype(d.device_get)>(sym("cuDeviceGet"));
  d.device_get_name = reinterpret_cast<decltype(d.device_get_name)>(sym("cuDeviceGetName"));
  d.device_get_attribute = reinterpret_cast<decltype(d.device_get_attribute)>(sym("cuDeviceGetAttribute"));
  d.device_total_mem = reinterpret_cast<decltype(d.device_total_mem)>(sym("cuDeviceTotalMem_v2"));
  d.primary_ctx_retain = reinterpret_cast<decltype(d.primary_ctx_retain)>(sym("cuDevicePrimaryCtxRetain"));
  d.ctx_set_current = reinterpret_cast<decltype(d.ctx_set_current)>(sym("cuCtxSetCurrent"));
  d.mem_alloc = reinterpret_cast<decltype(d.mem_alloc)>(sym("cuMemAlloc_v2"));
  d.mem_free = reinterpret_cast<decltype(d.mem_free)>(sym("cuMemFree_v2"));
  d.memcpy_htod = reinterpret_cast<decltype(d.memcpy_htod)>(sym("cuMemcpyHtoD_v2"));
  d.memcpy_dtoh = reinterpret_cast<decltype(d.memcpy_dtoh)>(sym("cuMemcpyDtoH_v2"));
  d.memcpy_dtod = reinterpret_cast<decltype(d.memcpy_dtod)>(sym("cuMemcpyDtoD_v2"));
  d.module_load_data = reinterpret_cast<decltype(d.module_load_data)>(sym("cuModuleLoadData"));
  d.module_get_function = reinterpret_cast<decltype(d.module_get_function)>(sym("cuModuleGetFunction"));
  d.func_get_attribute = reinterpret_cast<decltype(d.func_get_attribute)>(sym("cuFuncGetAttribute"));
  d.launch_kernel = reinterpret_cast<decltype(d.launch_kernel)>(sym("cuLaunchKernel"));
  d.ctx_synchronize = reinterpret_cast<decltype(d.ctx_synchronize)>(sym("cuCtxSynchronize"));
  d.event_create = reinterpret_cast<decltype(d.event_create)>(sym("cuEventCreate"));
  d.event_record = reinterpret_cast<decltype(d.event_record)>(sym("cuEventRecord"));
  d.stream_wait_event = reinterpret_cast<decltype(d.stream_wait_event)>(sym("cuStreamWaitEvent"));
  d.event_destroy = reinterpret_cast<decltype(d.event_destroy)>(sym("cuEventDestroy_v2"));
  d.get_error_string = reinterpret_cast<decltype(d.get_error_string)>(sym("cuGetErrorString"));
  int count = 0;
  if (!ok || d.init(0) != 0 || d.device_get_count(&count) != 0 || count == 0) {
    *why = ok ? "the NVIDIA driver reports no CUDA device" : "libcuda.so.1 lacks a driver API entry point";
    return nullptr;
  }
  static NvidiaAdapter* a = new NvidiaAdapter(d, count);
  return a;
}

}  // namespace ember::cuda
