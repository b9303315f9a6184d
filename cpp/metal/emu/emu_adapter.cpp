// The emulator's implementation of the adapter interface: host buffers, pipelines compiled by
// emu/compiler, command buffers queued on an emulated GPU that runs them later, in any order their barriers
// and fences allow (emu/runtime runs each dispatch).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>

#include "error.h"
#include "metal/adapter.h"
#include "metal/emu/compiler.h"
#include "emu/runtime.h"

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

// Execution order. By default (EMBER_METAL_EMU_ORDER unset or "shuffle") a committed command buffer
// only joins the emulated GPU's queue: it runs when the host waits on it (or on a later one), the
// dispatches between two barriers run in a shuffled order, and of the queued buffers any whose next
// step is not blocked on a fence may go first. So a missing barrier or fence, or a host read before
// the wait, gives wrong results. The choices come from EMBER_METAL_EMU_SEED (default 0), so a failing
// order repeats. "inorder" runs each buffer's dispatches in order at its commit.
bool shuffle_mode() {
  const char* e = std::getenv("EMBER_METAL_EMU_ORDER");
  return !(e && std::strcmp(e, "inorder") == 0);
}
uint64_t order_seed() {
  const char* e = std::getenv("EMBER_METAL_EMU_SEED");
  return e ? std::strtoull(e, nullptr, 0) : 0;
}
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fence counts the updates committed and the updates that have run; a wait encoded after the k-th
// committed update blocks until k have run.
struct EmuFence {
  uint64_t committed = 0, done = 0;
};

struct Command {
  enum class Kind : uint8_t { Dispatch, Barrier, Wait, Update } kind = Kind::Dispatch;
  emu::Launch launch;
  std::vector<uint8_t> read_only;  // per [[buffer(n)]]: 1 when the binding is an input
  EmuFence* fence = nullptr;
  uint64_t target = 0;
};

// Runs one dispatch. Bytes that only read-only (input) bindings reach are copied before and compared
// after, so a write through an input is caught however the kernel got a writable pointer to it; the
// input is then restored and the dispatch fails naming the kernel and the binding.
void run_dispatch(const Command& c) {
  const auto& b = c.launch.buffers;
  struct Span {
    size_t index;
    char* p;
    size_t n;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < b.size() && i < c.read_only.size(); ++i) {
    if (!c.read_only[i] || !b[i].data || !b[i].size) continue;
    // The parts of this input no writable binding of the dispatch overlaps.
    std::vector<std::pair<char*, char*>> parts = {{b[i].data, b[i].data + b[i].size}};
    for (size_t j = 0; j < b.size(); ++j) {
      if (j < c.read_only.size() && c.read_only[j]) continue;
      if (!b[j].data || j == i) continue;
      char *wb = b[j].data, *we = b[j].data + b[j].size;
      std::vector<std::pair<char*, char*>> next;
      for (auto [lo, hi] : parts) {
        if (we <= lo || wb >= hi) {
          next.push_back({lo, hi});
          continue;
        }
        if (lo < wb) next.push_back({lo, wb});
        if (we < hi) next.push_back({we, hi});
      }
      parts.swap(next);
    }
    for (auto [lo, hi] : parts) spans.push_back({i, lo, (size_t)(hi - lo)});
  }
  std::vector<std::string> before;
  before.reserve(spans.size());
  for (const Span& s : spans) before.emplace_back(s.p, s.n);
  emu::run_launch(c.launch);
  for (size_t k = 0; k < spans.size(); ++k) {
    const Span& s = spans[k];
    if (std::memcmp(s.p, before[k].data(), s.n) == 0) continue;
    size_t at = 0;
    while (s.p[at] == before[k][at]) ++at;
    const size_t off = (size_t)(s.p - b[s.index].data) + at;
    for (size_t m = k; m < spans.size(); ++m) std::memcpy(spans[m].p, before[m].data(), spans[m].n);
    throw Error(ErrorKind::Value, cat_str("[metal] kernel '", c.launch.kernel->name, "' (", c.launch.label,
                                          "): wrote to buffer(", s.index, ") at byte offset ", off,
                                          ", which is bound as an input (read-only); the write was undone"));
  }
}

class EmuCommandBuffer;

// The emulated GPU's queue of committed command buffers (shuffle mode), shared by every buffer.
struct GpuQueue {
  std::mutex mu;
  std::vector<EmuCommandBuffer*> queued;
};
GpuQueue& gpu_queue() {
  static GpuQueue* q = new GpuQueue();  // leaked: buffers may be waited on at exit
  return *q;
}

class EmuEncoder final : public Encoder {
 public:
  explicit EmuEncoder(std::vector<Command>& cmds, std::deque<std::string>& bytes) : cmds_(cmds), bytes_(bytes) {}
  void set_pipeline(PipelineHandle p) override { pipeline_ = static_cast<EmuPipeline*>(p.p); }
  void set_buffer(BufferHandle b, size_t offset, uint32_t index) override {
    auto* eb = static_cast<EmuBuffer*>(b.p);
    EMBER_CHECK(eb != nullptr, Value, "[metal] set_buffer: no buffer for index ", index);
    EMBER_CHECK(offset <= eb->length, Value, "[metal] set_buffer: offset ", offset, " past the buffer's ", eb->length, " bytes");
    bind(index) = {eb->data + offset, eb->length - offset};
    read_only_[index] = 0;
  }
  void set_buffer_extent(uint32_t index, size_t length, bool read_only) override {
    msl_abi::Buffer& b = bind(index);
    EMBER_CHECK(b.data != nullptr && length <= b.size, Value, "[metal] set_buffer_extent: ", length,
                " bytes at buffer(", index, "), which binds ", b.size);
    b.size = length;
    read_only_[index] = read_only ? 1 : 0;
  }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    EMBER_CHECK(length <= 4096, Value, "[metal] set_bytes: ", length, " bytes; Metal allows 4096 (use a buffer)");
    bytes_.emplace_back(static_cast<const char*>(data), length);
    bind(index) = {bytes_.back().data(), length};
    read_only_[index] = 0;
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
    c.read_only = read_only_;
    c.launch.threadgroup_mem = tg_;
    c.launch.grid[0] = grid.x, c.launch.grid[1] = grid.y, c.launch.grid[2] = grid.z;
    c.launch.group[0] = group.x, c.launch.group[1] = group.y, c.launch.group[2] = group.z;
    cmds_.push_back(std::move(c));
  }
  void memory_barrier() override { push(Command::Kind::Barrier, nullptr); }
  void update_fence(FenceHandle f) override { push(Command::Kind::Update, static_cast<EmuFence*>(f.p)); }
  void wait_for_fence(FenceHandle f) override {
    auto* fence = static_cast<EmuFence*>(f.p);
    push(Command::Kind::Wait, fence);
    std::lock_guard<std::mutex> lock(gpu_queue().mu);
    cmds_.back().target = fence->committed;  // the updates committed so far
  }
  void end_encoding() override {}

 private:
  void push(Command::Kind k, EmuFence* f) {
    Command c;
    c.kind = k;
    c.fence = f;
    cmds_.push_back(std::move(c));
  }
  msl_abi::Buffer& bind(uint32_t index) {
    EMBER_CHECK(index < 31, Value, "[metal] buffer index ", index, " out of range (Metal has 31 argument slots)");
    if (bindings_.size() <= index) bindings_.resize(index + 1, msl_abi::Buffer{nullptr, 0});
    if (read_only_.size() <= index) read_only_.resize(index + 1, 0);
    return bindings_[index];
  }
  std::vector<Command>& cmds_;
  std::deque<std::string>& bytes_;
  EmuPipeline* pipeline_ = nullptr;
  std::vector<msl_abi::Buffer> bindings_;
  std::vector<uint8_t> read_only_;
  std::vector<uint64_t> tg_;
};

class EmuCommandBuffer final : public CommandBuffer {
 public:
  ~EmuCommandBuffer() override {
    // A GPU finishes committed work even when nobody waits for it.
    if (committed_ && !done_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  Encoder& compute_encoder() override {
    if (!encoder_) encoder_ = std::make_unique<EmuEncoder>(cmds_, bytes_);
    return *encoder_;
  }
  void commit() override {
    EMBER_CHECK(!committed_, Value, "[metal] commit: this command buffer was already committed");
    committed_ = true;
    if (!shuffle_mode()) {
      run_in_order();
      return;
    }
    GpuQueue& q = gpu_queue();
    std::lock_guard<std::mutex> lock(q.mu);
    // The choices hang on the seed and on what the buffer holds (its kernels and grids), not on how many
    // buffers ran before, so one seed gives one test the same order whatever ran before it.
    fp_ = order_seed();
    for (const Command& c : cmds_) {
      fp_ = mix(fp_ ^ (uint64_t)c.kind);
      if (c.kind != Command::Kind::Dispatch) continue;
      for (const char* p = c.launch.kernel->name; *p; ++p) fp_ = mix(fp_ ^ (unsigned char)*p);
      fp_ = mix(fp_ ^ ((uint64_t)c.launch.grid[0] << 32 | c.launch.grid[1]) ^ c.launch.grid[2]);
    }
    uint64_t r = fp_;
    // The plan: steps of dispatches (each run between two barriers, shuffled), fence waits and updates.
    std::vector<size_t> seg;
    auto close = [&] {
      for (size_t i = seg.size(); i > 1; --i) {
        r = mix(r);
        std::swap(seg[i - 1], seg[r % i]);
      }
      for (size_t i : seg) plan_.push_back(i);
      seg.clear();
    };
    for (size_t i = 0; i < cmds_.size(); ++i) {
      Command& c = cmds_[i];
      if (c.kind == Command::Kind::Dispatch) {
        seg.push_back(i);
        continue;
      }
      close();
      if (c.kind == Command::Kind::Update) c.target = ++c.fence->committed;
      if (c.kind != Command::Kind::Barrier) plan_.push_back(i);
    }
    close();
    q.queued.push_back(this);
  }
  // Runs queued buffers (this one and any others, in an order the fences allow) until this one is done.
  void wait() override {
    EMBER_CHECK(committed_, Value, "[metal] wait: the command buffer was never committed");
    if (!done_) {
      GpuQueue& q = gpu_queue();
      std::lock_guard<std::mutex> lock(q.mu);
      while (!done_) {
        std::vector<EmuCommandBuffer*> ready;
        for (EmuCommandBuffer* cb : q.queued)
          if (cb->runnable()) ready.push_back(cb);
        if (ready.empty()) {
          // Every queued buffer waits on a fence that no committed work will update: Metal would hang.
          error_ = std::make_unique<Error>(
              ErrorKind::Value, "[metal] a command buffer waits on a fence that no committed command buffer updates "
                                "(the GPU would wait forever)");
          finish(q);
          break;
        }
        uint64_t h = order_seed();
        for (EmuCommandBuffer* c : ready) h = mix(h ^ c->fp_ ^ c->pos_);
        EmuCommandBuffer* cb = ready[h % ready.size()];
        cb->step();
        if (cb->pos_ == cb->plan_.size()) cb->finish(q);
      }
    }
    if (error_) throw *error_;
  }

 private:
  bool runnable() const {
    if (pos_ >= plan_.size()) return true;
    const Command& c = cmds_[plan_[pos_]];
    return c.kind != Command::Kind::Wait || c.fence->done >= c.target;
  }
  // Runs the next step; after a failing dispatch the rest are skipped (a GPU abandons a command
  // buffer whose kernel faulted) but its fence updates still happen.
  void step() {
    if (pos_ >= plan_.size()) return;
    Command& c = cmds_[plan_[pos_++]];
    if (c.kind == Command::Kind::Update) {
      c.fence->done = std::max(c.fence->done, c.target);
    } else if (c.kind == Command::Kind::Dispatch && !error_) {
      try {
        run_dispatch(c);
      } catch (const Error& e) {
        error_ = std::make_unique<Error>(e);
      }
    }
  }
  void finish(GpuQueue& q) {
    done_ = true;
    q.queued.erase(std::remove(q.queued.begin(), q.queued.end(), this), q.queued.end());
  }
  void run_in_order() {
    for (Command& c : cmds_) {
      if (c.kind == Command::Kind::Update) {
        std::lock_guard<std::mutex> lock(gpu_queue().mu);
        c.fence->done = ++c.fence->committed;
      }
      if (c.kind != Command::Kind::Dispatch || error_) continue;
      try {
        run_dispatch(c);
      } catch (const Error& e) {
        error_ = std::make_unique<Error>(e);
      }
    }
    done_ = true;
  }

  std::vector<Command> cmds_;
  std::deque<std::string> bytes_;
  std::unique_ptr<EmuEncoder> encoder_;
  std::unique_ptr<Error> error_;
  std::vector<size_t> plan_;  // indices into cmds_, in the order they run
  size_t pos_ = 0;
  uint64_t fp_ = 0;  // the seed mixed with the buffer's contents: its shuffle and its turns
  bool committed_ = false, done_ = false;
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
    for (const auto& c : constants) opt.constants.emplace_back(c.index, gpu::constant_literal(c));
    if (const char* t = std::getenv("EMBER_METAL_EMU_TSAN"); t && *t == '1') opt.tsan = true;
    if (const char* t = std::getenv("EMBER_METAL_EMU_GPU_MATH"); t && *t == '1') opt.gpu_math = true;
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

  FenceHandle new_fence() override { return FenceHandle{new EmuFence()}; }
  void release(FenceHandle f) override { delete static_cast<EmuFence*>(f.p); }

  std::unique_ptr<CommandBuffer> new_command_buffer() override { return std::make_unique<EmuCommandBuffer>(); }
};

}  // namespace

Adapter& emulator_adapter() {
  static EmuAdapter* a = new EmuAdapter();  // leaked: kernels may run until the process exits
  return *a;
}

}  // namespace ember::metal
