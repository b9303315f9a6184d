// Thread pool: workers spin briefly, then sleep on a condition variable; each parallel_for splits
// [0, n) into a few contiguous chunks per thread. Thread t owns the t-th run of chunks (the same rows
// on every call, so data stays in that core's caches) and steals from the others once its own are done.
// Also: the pool's fork handlers (a child gets a fresh pool) and the Ctrl-C checks between pieces.
#include "cpu/parallel.h"

#include "error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <system_error>
#include <thread>
#include <vector>

namespace ember::cpu {

void blas_set_num_threads(int n);  // matmul.cpp

namespace {

thread_local bool t_in_worker = false;

// Ctrl-C: the SIGINT hook counts interrupts; an InterruptScope remembers the count its op began at.
std::atomic<uint64_t> g_interrupts{0};
thread_local bool t_watch = false;
thread_local uint64_t t_since = 0;
inline bool interrupted_since(uint64_t since) { return g_interrupts.load(std::memory_order_acquire) != since; }

// Runs fn over [b, e) in pieces, stopping (returning false) before the first piece that finds an
// interrupt noted since `since`. Pieces start at `grain` and double while one takes under 2 ms, so a
// cheap op makes a few calls per chunk and an expensive one (a matmul tile) is checked every tile.
bool run_watched(const std::function<void(int64_t, int64_t)>& fn, int64_t b, int64_t e, int64_t grain,
                 uint64_t since) {
  using clock = std::chrono::steady_clock;
  int64_t piece = grain;
  for (int64_t s = b; s < e;) {
    if (interrupted_since(since)) return false;
    const int64_t len = std::min(piece, e - s);
    const auto t0 = clock::now();
    fn(s, s + len);
    s += len;
    if (clock::now() - t0 < std::chrono::milliseconds(2) && piece < (int64_t(1) << 40)) piece *= 2;
  }
  return true;
}

[[noreturn]] void throw_interrupted() {
  throw Error(ErrorKind::Interrupted, "[interrupt] the operation was interrupted (SIGINT)");
}

// How long a worker (or the caller waiting for the last chunk) spins before it sleeps. Waking a
// sleeping thread costs tens to hundreds of microseconds on a VM (an IPI to a halted vCPU), paid on
// every call of a training loop whose ops arrive a few microseconds apart; OpenMP runtimes spin too.
// EMBER_SPIN_US=n changes it (0: sleep at once, for machines whose cores other programs need more than
// ember needs fast wake-ups; like OMP_WAIT_POLICY=passive). Read once, at the first parallel call.
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    if (const char* e = std::getenv("EMBER_SPIN_US")) {
      char* end = nullptr;
      const long n = std::strtol(e, &end, 10);
      if (end != e && *end == '\0' && n >= 0) return std::chrono::microseconds(std::min<long>(n, 1000000));
    }
    return std::chrono::microseconds(1000);  // unset or unreadable: the default
  }();
  return t;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A spinning thread that finds a gap this long between two of its clock reads (64 pauses, a few
// microseconds) was descheduled: the cores are oversubscribed (other processes, or more threads than
// cores), where spinning only takes time from the threads with work. It then sleeps at once, and this
// thread skips spinning for kBackoff (a yield that let another thread run counts as such a gap).
constexpr auto kPreempted = std::chrono::microseconds(200);
constexpr auto kBackoff = std::chrono::milliseconds(50);
thread_local std::chrono::steady_clock::time_point t_no_spin_until{};

// Spins until pred() holds or spin_time() has passed; returns pred(). After the first ~4096 pauses it
// yields the core between checks: free on an idle core, and on a busy one the thread with work runs.
template <typename P> bool spin_until(P&& pred) {
  using clock = std::chrono::steady_clock;
  auto last = clock::now();
  if (last < t_no_spin_until) return pred();
  const auto deadline = last + spin_time();
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      const auto now = clock::now();
      if (now > deadline) return pred();
      if (i > 4096) sched_yield();
      if (now - last > kPreempted) {
        t_no_spin_until = now + kBackoff;
        return pred();
      }
      last = now;
    }
  }
}

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return nthreads_.load(std::memory_order_relaxed); }

  void resize(int n) {
    std::lock_guard<std::mutex> run(run_mu_);
    stop();
    start(n);
  }

  // Returns false when the pool is busy (another caller) so the caller runs inline instead. The chunk
  // count is taken here, under run_mu_, so a concurrent resize cannot change the size it is based on.
  bool run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock()) return false;
    const int nt = nthreads_.load(std::memory_order_relaxed);
    // A few chunks per thread, claimed dynamically: on a shared machine one slow core no longer holds
    // the whole op back (chunk boundaries still depend only on n, grain and the pool size).
    const int64_t chunks = std::min<int64_t>(4 * (int64_t)nt, (n + grain - 1) / grain);
    if (chunks <= 1) return false;
    Job job;
    {
      std::lock_guard<std::mutex> g(mu_);
      job = Job{generation_.load() + 1, &fn, n, chunks, grain, nt, t_watch, t_since};
      job_ = job;
      pending_.store(chunks);
      error_ = nullptr;
      stopped_ = false;
      for (int t = 0; t < nt; ++t) claim_[t].v.store((job.gen << 32) | (uint64_t)first_chunk(job, t));
      generation_.store(job.gen);   // published last: spinning workers then read job_ under mu_
    }
    cv_.notify_all();
    // The caller works too; mark it as a worker meanwhile so a nested parallel_for inside fn runs
    // inline instead of try_lock-ing run_mu_, which this thread already holds (undefined behaviour).
    const bool was_worker = t_in_worker;
    t_in_worker = true;
    work(job, 0);
    t_in_worker = was_worker;
    if (!spin_until([&] { return pending_.load() == 0; })) {
      std::unique_lock<std::mutex> g(mu_);
      done_cv_.wait(g, [&] { return pending_.load() == 0; });
    }
    std::lock_guard<std::mutex> g(mu_);
    if (error_) std::rethrow_exception(error_);
    if (stopped_) throw_interrupted();
    return true;
  }

 private:
  void start(int n) {
    nthreads_.store(std::max(1, n));
    claim_ = std::vector<Claim>(nthreads_.load());
    quit_.store(false);
    // New workers wait for the next job: job_ may still be the last one, split for the old size.
    const uint64_t gen = generation_.load();
    for (int i = 1; i < nthreads_.load(); ++i) workers_.emplace_back([this, i, gen] { loop(i, gen); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // One parallel_for call: its generation, body, split, the pool size it was split for, and whether
  // it stops at an interrupt noted after `since`.
  struct Job {
    uint64_t gen = 0;
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0, chunks = 0, grain = 1;
    int nthreads = 1;
    bool watch = false;
    uint64_t since = 0;
  };

  void loop(int tid, uint64_t seen) {
    t_in_worker = true;
    auto woken = [&] { return quit_.load() || generation_.load() != seen; };
    while (true) {
      Job job;
      if (!spin_until(woken)) {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, woken);
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        if (quit_.load()) return;
        job = job_;
      }
      seen = job.gen;
      work(job, tid);
    }
  }

  static int64_t first_chunk(const Job& job, int t) { return job.chunks * t / job.nthreads; }

  // Claims one chunk of thread t's run for `job`, or returns -1. A claim carries the generation in its
  // high bits, so a worker that arrives late for a finished job can never take (and run with the wrong
  // body) a chunk of the next one.
  int64_t claim(const Job& job, int t) {
    const int64_t end = first_chunk(job, t + 1);
    std::atomic<uint64_t>& a = claim_[t].v;
    uint64_t cur = a.load();
    do {
      if ((cur >> 32) != (job.gen & 0xffffffffu) || (int64_t)(cur & 0xffffffffu) >= end) return -1;
    } while (!a.compare_exchange_weak(cur, cur + 1));
    return (int64_t)(cur & 0xffffffffu);
  }

  // Runs thread tid's own chunks, then steals the rest; the last finisher wakes the caller.
  void work(const Job& job, int tid) {
    for (int k = 0; k < job.nthreads; ++k) {
      const int t = (tid + k) % job.nthreads;
      for (int64_t c; (c = claim(job, t)) >= 0;) {
        const int64_t b = job.n * c / job.chunks, e = job.n * (c + 1) / job.chunks;
        try {
          if (!job.watch) {
            (*job.fn)(b, e);
          } else if (!run_watched(*job.fn, b, e, job.grain, job.since)) {
            std::lock_guard<std::mutex> g(mu_);
            stopped_ = true;  // the remaining chunks still count down, each skipping its work
          }
        } catch (...) {
          std::lock_guard<std::mutex> g(mu_);
          if (!error_) error_ = std::current_exception();
        }
        if (pending_.fetch_sub(1) == 1) {
          std::lock_guard<std::mutex> g(mu_);  // under the lock: a caller about to sleep cannot miss it
          done_cv_.notify_all();
        }
      }
    }
  }

  // One claim word per thread, each on its own cache line: (generation << 32) | next chunk.
  struct alignas(64) Claim {
    std::atomic<uint64_t> v{0};
  };

  std::atomic<int> nthreads_{1};   // written only by start(), under run_mu_ (or in the constructor)
  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> quit_{false};
  Job job_;                         // guarded by mu_
  std::vector<Claim> claim_;        // one per thread, (re)made only while no job runs
  std::atomic<int64_t> pending_{0};
  std::exception_ptr error_;       // guarded by mu_
  bool stopped_ = false;           // guarded by mu_: a chunk saw an interrupt
};

// More threads than this buys nothing and, near INT_MAX, spends seconds and the process's thread
// limit before std::thread fails halfway through a resize.
constexpr int kMaxThreads = 1024;

int default_threads() {
  if (const char* e = std::getenv("EMBER_NUM_THREADS")) {
    long n = std::strtol(e, nullptr, 10);  // atoi is undefined past INT_MAX
    if (n > 0) return (int)std::min<long>(n, kMaxThreads);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? (int)hw : 1;
}

// The pool is made at first use and replaced in a forked child, whose copy of it has no workers (they
// are threads of the parent): the child's first parallel call makes a fresh pool of the same size.
// g_pool_mu serialises creation and resizing, and is held across fork() so that neither is half done.
std::mutex g_pool_mu;
std::atomic<Pool*> g_pool{nullptr};
std::atomic<int> g_size{0};  // the size asked for (0: not yet decided); a forked child keeps it

void fork_prepare() { g_pool_mu.lock(); }
void fork_parent() { g_pool_mu.unlock(); }
void fork_child() {
  // Leaked on purpose: destroying it would join (or std::terminate on) threads that do not exist here.
  g_pool.store(nullptr);
  t_in_worker = false;
  g_pool_mu.unlock();
}
const int g_atfork_registered = pthread_atfork(fork_prepare, fork_parent, fork_child);

// Under g_pool_mu: the pool, made with the size asked for (or the default) when there is none.
Pool& pool_locked() {
  Pool* p = g_pool.load();
  if (!p) {
    int n = g_size.load();
    if (n <= 0) n = default_threads();
    blas_set_num_threads(n);
    // Leaked on purpose: joining threads during static destruction at interpreter exit can hang.
    p = new Pool(n);
    g_size.store(n);
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

Pool& pool() {
  if (Pool* p = g_pool.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> g(g_pool_mu);
  return pool_locked();
}

}  // namespace

void note_interrupt() { g_interrupts.fetch_add(1, std::memory_order_release); }
uint64_t interrupt_count() { return g_interrupts.load(std::memory_order_acquire); }

InterruptScope::InterruptScope() : prev_active_(t_watch), prev_since_(t_since) {
  t_watch = true;
  t_since = g_interrupts.load(std::memory_order_relaxed);
}
InterruptScope::~InterruptScope() {
  t_watch = prev_active_;
  t_since = prev_since_;
}

int get_num_threads() { return pool().size(); }

void set_num_threads(int n) {
  (void)g_atfork_registered;
  EMBER_CHECK(n >= 1 && n <= kMaxThreads, Value, "[set_num_threads] n must be between 1 and ", kMaxThreads,
              ", got ", n);
  std::lock_guard<std::mutex> g(g_pool_mu);
  Pool& p = pool_locked();
  const int before = p.size();
  try {
    p.resize(n);
  } catch (const std::system_error& e) {
    // The system refused a thread (a process or memory limit): back to the size that worked.
    p.resize(before);
    throw Error(ErrorKind::Value, cat_str("[set_num_threads] cannot start ", n, " threads (", e.what(),
                                          "); the pool keeps its ", before));
  }
  g_size.store(n);
  blas_set_num_threads(n);
}

void parallel_for_pooled(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const bool watch = t_watch;
  if (watch && interrupted_since(t_since)) throw_interrupted();
  if (!t_in_worker && pool().run(n, grain, fn)) return;
  // Inline: one chunk's worth of work, a nested call, or the pool busy with another caller.
  if (!watch) fn(0, n);
  else if (!run_watched(fn, 0, n, grain, t_since)) throw_interrupted();
}

}  // namespace ember::cpu
