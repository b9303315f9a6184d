// The emulator's implementation of the adapter interface: host buffers, pipelines compiled by
// emu/compiler, command buffers that run their dispatches in order at commit (emu/runtime).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>

#include "error.h"
#include "metal/adapter.h"
#include "metal/emu/compiler.h"
#include "metal/emu/runtime.h"

namespace ember::metal {
namespace {

struct EmuBuffer {
  char* data;
  size_t length;
};

struct EmuLibrary {
  std::string source, label;  // compiled per set of function constants (they are macros here)
};

struct EmuPipeline {
  std::shared_ptr<const emu::Module> module;
  const msl_abi::Kernel* kernel;
  uint32_t max_threads;  // this pipeline's maxTotalThreadsPerThreadgroup
};

// A GPU pipeline may allow fewer threads per group than the device (register use, shader validation):
// EMBER_METAL_EMU_MAX_THREADS (32..1024, whole simdgroups) plays that, so every launcher must ask.
uint32_t pipeline_thread_limit() {
  const char* e = std::getenv("EMBER_METAL_EMU_MAX_THREADS");
  if (!e || !*e) return emu::kMaxThreadsPerGroup;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  EMBER_CHECK(end != e && *end == '\0' && v >= 32 && v <= (long)emu::kMaxThreadsPerGroup && v % 32 == 0, Value,
              "[metal] EMBER_METAL_EMU_MAX_THREADS=", e, ": a multiple of 32 from 32 to ", emu::kMaxThreadsPerGroup);
  return (uint32_t)v;
}

std::string literal(const FunctionConstant& c) {
  char buf[64];
  switch (c.type) {
    case FunctionConstant::Type::Bool: return c.value != 0 ? "true" : "false";
    case FunctionConstant::Type::Int: std::snprintf(buf, sizeof buf, "(%lld)", (long long)c.value); return buf;
    case FunctionConstant::Type::UInt: std::snprintf(buf, sizeof buf, "%lluu", (unsigned long long)c.value); return buf;
    case FunctionConstant::Type::Float: std::snprintf(buf, sizeof buf, "%af", (double)(float)c.value); return buf;
  }
  return "0";
}

struct Command {
  emu::Launch launch;
  bool barrier = false;  // a memory barrier: ordering is already total here
};

class EmuEncoder final : public Encoder {
 public:
  explicit EmuEncoder(std::vector<Command>& cmds, std::deque<std::string>& bytes) : cmds_(cmds), bytes_(bytes) {}
  void set_pipeline(PipelineHandle p) override { pipeline_ = static_cast<EmuPipeline*>(p.p); }
  void set_buffer(BufferHandle b, size_t offset, uint32_t index) override {
    auto* eb = static_cast<EmuBuffer*>(b.p);
    EMBER_CHECK(eb != nullptr, Value, "[metal] set_buffer: no buffer for index ", index);
    EMBER_CHECK(offset <= eb->length, Value, "[metal] set_buffer: offset ", offset, " past the buffer's ", eb->length, " bytes");
    bind(index) = {eb->data + offset, eb->length - offset};
  }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    EMBER_CHECK(length <= 4096, Value, "[metal] set_bytes: ", length, " bytes; Metal allows 4096 (use a buffer)");
    bytes_.emplace_back(static_cast<const char*>(data), length);
    bind(index) = {bytes_.back().data(), length};
  }
  void set_threadgroup_memory(size_t length, uint32_t index) override {
    if (tg_.size() <= index) tg_.resize(index + 1, 0);
    tg_[index] = length;
  }
  void dispatch_threads(Dim3 grid, Dim3 group) override {
    EMBER_CHECK(pipeline_ != nullptr, Value, "[metal] dispatch_threads without a pipeline");
    const uint64_t threads = (uint64_t)group.x * group.y * group.z;
    // (past the device's 1024 the runtime's own message says so)
    EMBER_CHECK(threads > emu::kMaxThreadsPerGroup || threads <= pipeline_->max_threads, Value, "[metal] kernel '", pipeline_->kernel->name,
                "': a threadgroup of ", threads, " threads; this pipeline allows at most ", pipeline_->max_threads,
                " (maxTotalThreadsPerThreadgroup)");
    Command c;
    c.launch.kernel = pipeline_->kernel;
    c.launch.label = pipeline_->module->label();
    c.launch.buffers = bindings_;
    c.launch.threadgroup_mem = tg_;
    c.launch.grid[0] = grid.x, c.launch.grid[1] = grid.y, c.launch.grid[2] = grid.z;
    c.launch.group[0] = group.x, c.launch.group[1] = group.y, c.launch.group[2] = group.z;
    cmds_.push_back(std::move(c));
  }
  void memory_barrier() override {
    Command c;
    c.barrier = true;
    cmds_.push_back(std::move(c));
  }
  // The emulator runs a command buffer's dispatches in order at its commit, and command buffers one
  // after another, so every fence is already satisfied.
  void update_fence(FenceHandle) override {}
  void wait_for_fence(FenceHandle) override {}
  void end_encoding() override {}

 private:
  msl_abi::Buffer& bind(uint32_t index) {
    EMBER_CHECK(index < 31, Value, "[metal] buffer index ", index, " out of range (Metal has 31 argument slots)");
    if (bindings_.size() <= index) bindings_.resize(index + 1, msl_abi::Buffer{nullptr, 0});
    return bindings_[index];
  }
  std::vector<Command>& cmds_;
  std::deque<std::string>& bytes_;
  EmuPipeline* pipeline_ = nullptr;
  std::vector<msl_abi::Buffer> bindings_;
  std::vector<uint64_t> tg_;
};

class EmuCommandBuffer final : public CommandBuffer {
 public:
  Encoder& compute_encoder() override {
    if (!encoder_) encoder_ = std::make_unique<EmuEncoder>(cmds_, bytes_);
    return *encoder_;
  }
  // Runs every dispatch in order; after a failing one the rest are skipped, as a GPU abandons a
  // command buffer whose kernel faulted.
  void commit() override {
    EMBER_CHECK(!committed_, Value, "[metal] commit: this command buffer was already committed");
    committed_ = true;
    for (const Command& c : cmds_) {
      if (c.barrier) continue;
      try {
        emu::run_launch(c.launch);
      } catch (const Error& e) {
        error_ = std::make_unique<Error>(e);
        break;
      }
    }
  }
  void wait() override {
    EMBER_CHECK(committed_, Value, "[metal] wait: the command buffer was never committed");
    if (error_) throw *error_;
  }

 private:
  std::vector<Command> cmds_;
  std::deque<std::string> bytes_;
  std::unique_ptr<EmuEncoder> encoder_;
  std::unique_ptr<Error> error_;
  bool committed_ = false;
};

class EmuAdapter final : public Adapter {
 public:
  const char* kind() const override { return "emulator"; }
  std::string device_name() const override { return "ember MSL emulator (CPU)"; }
  uint64_t recommended_working_set_size() const override { return 8ull << 30; }
  uint32_t max_threads_per_threadgroup() const override { return emu::kMaxThreadsPerGroup; }
  uint64_t max_threadgroup_memory() const override { return emu::threadgroup_memory_limit(); }

  BufferHandle new_buffer(size_t length) override {
    // 16 KiB alignment, the page size of Apple silicon; zero-filled like a fresh MTLBuffer
    const size_t n = std::max<size_t>(length, 1);
    void* p = nullptr;  // posix_memalign: std::aligned_alloc is macOS 10.15+ only
    if (posix_memalign(&p, 16384, (n + 16383) / 16384 * 16384) != 0) p = nullptr;
    EMBER_CHECK(p != nullptr, Memory, "[metal] cannot allocate a buffer of ", length, " bytes");
    std::memset(p, 0, n);
    return BufferHandle{new EmuBuffer{static_cast<char*>(p), length}};
  }
  BufferHandle new_buffer(const void* data, size_t length) override {
    BufferHandle b = new_buffer(length);
    if (length) std::memcpy(static_cast<EmuBuffer*>(b.p)->data, data, length);
    return b;
  }
  void release(BufferHandle b) override {
    auto* eb = static_cast<EmuBuffer*>(b.p);
    if (!eb) return;
    std::free(eb->data);
    delete eb;
  }
  void* contents(BufferHandle b) override { return static_cast<EmuBuffer*>(b.p)->data; }
  size_t length(BufferHandle b) override { return static_cast<EmuBuffer*>(b.p)->length; }

  LibraryHandle new_library(const std::string& source, const std::string& label) override {
    return LibraryHandle{new EmuLibrary{source, label}};
  }
  void release(LibraryHandle l) override { delete static_cast<EmuLibrary*>(l.p); }

  PipelineHandle new_pipeline(LibraryHandle library, const std::string& function,
                              const std::vector<FunctionConstant>& constants) override {
    const std::string& source = static_cast<EmuLibrary*>(library.p)->source;
    const std::string& label = static_cast<EmuLibrary*>(library.p)->label;
    emu::CompileOptions opt;
    for (const auto& c : constants) opt.constants.emplace_back(c.index, literal(c));
    if (const char* t = std::getenv("EMBER_METAL_EMU_TSAN"); t && *t == '1') opt.tsan = true;
    auto mod = emu::load_module(source, label, opt);
    const msl_abi::Kernel* k = mod->find(function);
    if (!k) {
      std::string have;
      for (const auto& n : mod->names()) have += (have.empty() ? "" : ", ") + n;
      throw Error(ErrorKind::Value, "[metal] " + label + " defines no kernel '" + function + "' (it defines: " +
                                        (have.empty() ? std::string("none") : have) + ")");
    }
    return PipelineHandle{new EmuPipeline{std::move(mod), k, pipeline_thread_limit()}};
  }
  void release(PipelineHandle p) override { delete static_cast<EmuPipeline*>(p.p); }
  uint32_t max_threads(PipelineHandle p) const override { return static_cast<EmuPipeline*>(p.p)->max_threads; }
  uint32_t execution_width(PipelineHandle) const override { return msl_abi::kSimdWidth; }

  FenceHandle new_fence() override { return FenceHandle{new char(0)}; }
  void release(FenceHandle f) override { delete static_cast<char*>(f.p); }

  std::unique_ptr<CommandBuffer> new_command_buffer() override { return std::make_unique<EmuCommandBuffer>(); }
};

}  // namespace

Adapter& emulator_adapter() {
  static EmuAdapter* a = new EmuAdapter();  // leaked: kernels may run until the process exits
  return *a;
}

}  // namespace ember::metal
