// The metal-cpp implementation of the adapter interface (Apple only): the one translation unit that defines
// NS/MTL/CA_PRIVATE_IMPLEMENTATION, and the only code in ember that includes metal-cpp headers.
#define NS_PRIVATE_IMPLEMENTATION
#define MTL_PRIVATE_IMPLEMENTATION
#define CA_PRIVATE_IMPLEMENTATION
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>
#include <QuartzCore/QuartzCore.hpp>

#include <cstring>
#include <mutex>

#include "error.h"
#include "metal/adapter.h"

namespace ember::metal {
namespace {

// Every entry point runs inside an autorelease pool, so autoreleased objects (errors, descriptors,
// strings) are freed when the call returns even on threads without a run loop.
struct Pool {
  NS::AutoreleasePool* p = NS::AutoreleasePool::alloc()->init();
  ~Pool() { p->release(); }
};

std::string ns_text(NS::Error* e) {
  if (!e) return "unknown error";
  NS::String* d = e->localizedDescription();
  return d ? std::string(d->utf8String()) : "unknown error";
}

MTL::Size size3(Dim3 d) { return MTL::Size(d.x, d.y, d.z); }

// ember's kernels are MSL 3.1 (bfloat, C++14) and assume 32-wide simdgroups: every library is compiled
// for exactly that language, and a device is refused unless this probe compiles and runs 32 wide.
constexpr const char* kProbeSource = R"(#include <metal_stdlib>
using namespace metal;
kernel void ember_probe(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]],
                        uint w [[threads_per_simdgroup]]) {
  const bfloat b = bfloat(float(w));
  out[i] = simd_sum(float(b));
}
)";

NS::SharedPtr<MTL::CompileOptions> compile_options() {
  auto opts = NS::TransferPtr(MTL::CompileOptions::alloc()->init());
  opts->setFastMathEnabled(false);  // the emulator computes IEEE results; keep the GPU to the same
  opts->setLanguageVersion(MTL::LanguageVersion3_1);
  return opts;
}

class AppleEncoder final : public Encoder {
 public:
  explicit AppleEncoder(MTL::ComputeCommandEncoder* e) : enc_(e) {}
  void set_pipeline(PipelineHandle p) override {
    enc_->setComputePipelineState(static_cast<MTL::ComputePipelineState*>(p.p));
  }
  void set_buffer(BufferHandle b, size_t offset, uint32_t index) override {
    enc_->setBuffer(static_cast<MTL::Buffer*>(b.p), offset, index);
  }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    EMBER_CHECK(length <= 4096, Value, "[metal] set_bytes: ", length, " bytes; Metal allows 4096 (use a buffer)");
    enc_->setBytes(data, length, index);
  }
  void set_threadgroup_memory(size_t length, uint32_t index) override {
    enc_->setThreadgroupMemoryLength((length + 15) / 16 * 16, index);  // Metal wants multiples of 16
  }
  void dispatch_threads(Dim3 grid, Dim3 group) override { enc_->dispatchThreads(size3(grid), size3(group)); }
  void memory_barrier() override { enc_->memoryBarrier(MTL::BarrierScopeBuffers); }
  void update_fence(FenceHandle f) override { enc_->updateFence(static_cast<MTL::Fence*>(f.p)); }
  void wait_for_fence(FenceHandle f) override { enc_->waitForFence(static_cast<MTL::Fence*>(f.p)); }
  void end_encoding() override {
    if (!ended_) enc_->endEncoding();
    ended_ = true;
  }

 private:
  MTL::ComputeCommandEncoder* enc_;  // owned by the command buffer (autoreleased, retained below)
  bool ended_ = false;
};

class AppleCommandBuffer final : public CommandBuffer {
 public:
  explicit AppleCommandBuffer(MTL::CommandQueue* q) {
    Pool pool;
    cb_ = NS::RetainPtr(q->commandBufferWithUnretainedReferences());
  }
  Encoder& compute_encoder() override {
    if (!encoder_) {
      Pool pool;
      // Concurrent dispatch: ember's hazard tracker inserts the barriers the dispatches need.
      enc_ = NS::RetainPtr(cb_->computeCommandEncoder(MTL::DispatchTypeConcurrent));
      encoder_ = std::make_unique<AppleEncoder>(enc_.get());
    }
    return *encoder_;
  }
  void commit() override {
    Pool pool;
    if (encoder_) encoder_->end_encoding();
    cb_->commit();
  }
  void wait() override {
    Pool pool;
    cb_->waitUntilCompleted();
    if (cb_->status() == MTL::CommandBufferStatusError)
      throw Error(ErrorKind::Value, "[metal] command buffer failed: " + ns_text(cb_->error()));
  }

 private:
  NS::SharedPtr<MTL::CommandBuffer> cb_;
  NS::SharedPtr<MTL::ComputeCommandEncoder> enc_;
  std::unique_ptr<AppleEncoder> encoder_;
};

class AppleAdapter final : public Adapter {
 public:
  AppleAdapter() {
    Pool pool;
    // A headless or virtualised session can have no device at all: say so instead of crashing.
    NS::Array* all = MTL::CopyAllDevices();
    const bool any = all && all->count() > 0;
    if (all) all->release();
    EMBER_CHECK(any, Device, "[metal] no Metal device is available on this machine");
    device_ = NS::TransferPtr(MTL::CreateSystemDefaultDevice());
    EMBER_CHECK(device_.get() != nullptr, Device, "[metal] MTLCreateSystemDefaultDevice returned no device");
    queue_ = NS::TransferPtr(device_->newCommandQueue());
    EMBER_CHECK(queue_.get() != nullptr, Device, "[metal] the device gave no command queue");
    const std::string name = device_->name()->utf8String();
    EMBER_CHECK(device_->supportsFamily(MTL::GPUFamilyMetal3), Device, "[metal] ", name,
                " does not support Metal 3 (ember's kernels need MSL 3.1)");
    NS::Error* err = nullptr;
    auto lib = NS::TransferPtr(
        device_->newLibrary(NS::String::string(kProbeSource, NS::UTF8StringEncoding), compile_options().get(), &err));
    EMBER_CHECK(lib.get() != nullptr, Device, "[metal] ", name,
                ": this system cannot compile Metal Shading Language 3.1 (macOS 14 or later is needed): ", ns_text(err));
    auto fn = NS::TransferPtr(lib->newFunction(NS::String::string("ember_probe", NS::UTF8StringEncoding)));
    EMBER_CHECK(fn.get() != nullptr, Device, "[metal] ", name, ": the probe kernel is missing from its library");
    auto probe = NS::TransferPtr(device_->newComputePipelineState(fn.get(), &err));
    EMBER_CHECK(probe.get() != nullptr, Device, "[metal] ", name, ": the probe pipeline failed: ", ns_text(err));
    EMBER_CHECK(probe->threadExecutionWidth() == 32, Device, "[metal] ", name, " runs simdgroups ",
                probe->threadExecutionWidth(), " wide; ember's kernels need 32");
  }
  const char* kind() const override { return "apple"; }
  std::string device_name() const override {
    Pool pool;
    return device_->name()->utf8String();
  }
  uint64_t recommended_working_set_size() const override { return device_->recommendedMaxWorkingSetSize(); }
  uint32_t max_threads_per_threadgroup() const override { return (uint32_t)device_->maxThreadsPerThreadgroup().width; }
  uint64_t max_threadgroup_memory() const override { return device_->maxThreadgroupMemoryLength(); }

  BufferHandle new_buffer(size_t length) override {
    Pool pool;
    MTL::Buffer* b = device_->newBuffer(std::max<size_t>(length, 1), kOptions);
    EMBER_CHECK(b != nullptr, Memory, "[metal] the device refused a buffer of ", length, " bytes");
    return BufferHandle{b};
  }
  BufferHandle new_buffer(const void* data, size_t length) override {
    Pool pool;
    MTL::Buffer* b = device_->newBuffer(data, std::max<size_t>(length, 1), kOptions);
    EMBER_CHECK(b != nullptr, Memory, "[metal] the device refused a buffer of ", length, " bytes");
    return BufferHandle{b};
  }
  void release(BufferHandle b) override {
    if (b.p) static_cast<MTL::Buffer*>(b.p)->release();
  }
  void* contents(BufferHandle b) override { return static_cast<MTL::Buffer*>(b.p)->contents(); }
  size_t length(BufferHandle b) override { return static_cast<MTL::Buffer*>(b.p)->length(); }

  LibraryHandle new_library(const std::string& source, const std::string& label) override {
    Pool pool;
    NS::Error* err = nullptr;
    MTL::Library* lib =
        device_->newLibrary(NS::String::string(source.c_str(), NS::UTF8StringEncoding), compile_options().get(), &err);
    if (!lib) throw Error(ErrorKind::Value, "[metal] compiling " + label + " failed:\n" + ns_text(err));
    lib->setLabel(NS::String::string(label.c_str(), NS::UTF8StringEncoding));  // for the pipelines' messages
    return LibraryHandle{lib};
  }
  void release(LibraryHandle l) override {
    if (l.p) static_cast<MTL::Library*>(l.p)->release();
  }

  PipelineHandle new_pipeline(LibraryHandle library, const std::string& function,
                              const std::vector<FunctionConstant>& constants) override {
    Pool pool;
    NS::Error* err = nullptr;
    MTL::Library* lib = static_cast<MTL::Library*>(library.p);
    const std::string label = lib->label() ? lib->label()->utf8String() : "the library";
    auto values = NS::TransferPtr(MTL::FunctionConstantValues::alloc()->init());
    for (const FunctionConstant& c : constants) {
      union {
        bool b;
        int32_t i;
        uint32_t u;
        float f;
      } v;
      MTL::DataType t = MTL::DataTypeInt;
      switch (c.type) {
        case FunctionConstant::Type::Bool: v.b = c.value != 0, t = MTL::DataTypeBool; break;
        case FunctionConstant::Type::Int: v.i = (int32_t)c.value, t = MTL::DataTypeInt; break;
        case FunctionConstant::Type::UInt: v.u = (uint32_t)c.value, t = MTL::DataTypeUInt; break;
        case FunctionConstant::Type::Float: v.f = (float)c.value, t = MTL::DataTypeFloat; break;
      }
      values->setConstantValue(&v, t, c.index);
    }
    auto fn = NS::TransferPtr(
        lib->newFunction(NS::String::string(function.c_str(), NS::UTF8StringEncoding), values.get(), &err));
    if (!fn) throw Error(ErrorKind::Value, "[metal] " + label + ": no kernel '" + function + "': " + ns_text(err));
    MTL::ComputePipelineState* p = device_->newComputePipelineState(fn.get(), &err);
    if (!p) throw Error(ErrorKind::Value, "[metal] pipeline for '" + function + "' failed: " + ns_text(err));
    return PipelineHandle{p};
  }
  void release(PipelineHandle p) override {
    if (p.p) static_cast<MTL::ComputePipelineState*>(p.p)->release();
  }
  uint32_t max_threads(PipelineHandle p) const override {
    return (uint32_t)static_cast<MTL::ComputePipelineState*>(p.p)->maxTotalThreadsPerThreadgroup();
  }
  uint32_t execution_width(PipelineHandle p) const override {
    return (uint32_t)static_cast<MTL::ComputePipelineState*>(p.p)->threadExecutionWidth();
  }

  FenceHandle new_fence() override {
    Pool pool;
    MTL::Fence* f = device_->newFence();
    EMBER_CHECK(f != nullptr, Memory, "[metal] the device gave no fence");
    return FenceHandle{f};
  }
  void release(FenceHandle f) override {
    if (f.p) static_cast<MTL::Fence*>(f.p)->release();
  }

  std::unique_ptr<CommandBuffer> new_command_buffer() override {
    return std::make_unique<AppleCommandBuffer>(queue_.get());
  }

 private:
  // Shared memory (CPU-visible) and untracked: ember's HazardTracker decides the barriers.
  static constexpr MTL::ResourceOptions kOptions = MTL::ResourceStorageModeShared | MTL::ResourceHazardTrackingModeUntracked;
  NS::SharedPtr<MTL::Device> device_;
  NS::SharedPtr<MTL::CommandQueue> queue_;
};

}  // namespace

Adapter& apple_adapter() {
  static AppleAdapter* a = new AppleAdapter();  // leaked: in-flight command buffers may outlive exit
  return *a;
}

}  // namespace ember::metal
