// A small persistent thread pool and parallel_for; the only source of threads in ember.
#pragma once
#include <cstdint>
#include <functional>

namespace ember::cpu {

int get_num_threads();
void set_num_threads(int n);  // also sets BLAS's thread count

// Ctrl-C between work chunks. note_interrupt() is what the SIGINT hook calls (async-signal-safe: one
// atomic increment). While an InterruptScope lives on a thread, the pooled work of that thread's op
// checks for an interrupt noted since the scope began, between pieces of its chunks, and once one is
// seen skips the rest and throws Error(Interrupted). Scopes nest; threads without one never stop.
void note_interrupt();
uint64_t interrupt_count();  // how many interrupts were noted so far (the MSL emulator's watchdog reads it)
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  bool prev_active_;
  uint64_t prev_since_;
};

// The pooled path of parallel_for (takes a std::function, which may allocate).
void parallel_for_pooled(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Runs fn(begin, end) over [0, n) in chunks of at least `grain`. Runs inline when the range is small,
// when called from inside a worker, or when another thread is already using the pool. Small ranges
// never build a std::function, which keeps tiny ops cheap.
template <typename F> inline void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (n <= grain) {
    fn((int64_t)0, n);
    return;
  }
  parallel_for_pooled(n, grain, std::function<void(int64_t, int64_t)>(std::forward<F>(fn)));
}

}  // namespace ember::cpu
