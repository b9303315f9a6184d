// A small persistent thread pool and parallel_for; the only source of threads in ember.
#pragma once
#include <cstdint>
#include <functional>

namespace ember::cpu {

int get_num_threads();
void set_num_threads(int n);  // also sets BLAS's thread count

// Runs fn(begin, end) over [0, n) in chunks of at least `grain`. Runs inline when the range is small,
// when called from inside a worker, or when another thread is already using the pool.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ember::cpu
