// Thread pool: workers sleep on a condition variable; each parallel_for splits [0, n) into a few
// contiguous chunks per thread, which the threads (caller included) claim dynamically.
#include "cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ember::cpu {

void blas_set_num_threads(int n);  // matmul.cpp

namespace {

thread_local bool t_in_worker = false;

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return nthreads_; }

  void resize(int n) {
    std::lock_guard<std::mutex> run(run_mu_);
    stop();
    start(n);
  }

  // Returns false when the pool is busy (another caller) so the caller runs inline instead.
  bool run(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_.store(0);
      pending_ = chunks;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    // The caller works too; mark it as a worker meanwhile so a nested parallel_for inside fn runs
    // inline instead of try_lock-ing run_mu_, which this thread already holds (undefined behaviour).
    const bool was_worker = t_in_worker;
    t_in_worker = true;
    work();
    t_in_worker = was_worker;
    std::unique_lock<std::mutex> g(mu_);
    done_cv_.wait(g, [&] { return pending_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void start(int n) {
    nthreads_ = std::max(1, n);
    quit_ = false;
    for (int i = 1; i < nthreads_; ++i) workers_.emplace_back([this] { loop(); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void loop() {
    t_in_worker = true;
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
      }
      work();
    }
  }

  // Claims chunks until none are left; the last finisher wakes the caller.
  void work() {
    while (true) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      int64_t b = n_ * c / chunks_, e = n_ * (c + 1) / chunks_;
      try {
        (*fn_)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  int nthreads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  uint64_t generation_ = 0;
  bool quit_ = false;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t pending_ = 0;
  std::exception_ptr error_;
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

Pool& pool() {
  // Leaked on purpose: joining threads during static destruction at interpreter exit can hang.
  static Pool* p = [] {
    int n = default_threads();
    blas_set_num_threads(n);
    return new Pool(n);
  }();
  return *p;
}

}  // namespace

int get_num_threads() { return pool().size(); }

void set_num_threads(int n) {
  n = std::min(std::max(1, n), kMaxThreads);
  pool().resize(n);
  blas_set_num_threads(n);
}

void parallel_for_pooled(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  Pool& p = pool();
  // A few chunks per thread, claimed dynamically: on a shared machine one slow core no longer holds
  // the whole op back (chunk boundaries still depend only on n, grain and the pool size).
  int64_t chunks = std::min<int64_t>(4 * (int64_t)p.size(), (n + grain - 1) / grain);
  if (chunks <= 1 || t_in_worker || !p.run(n, chunks, fn)) fn(0, n);
}

}  // namespace ember::cpu
