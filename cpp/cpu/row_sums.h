// Sums of many short contiguous rows (a global average pool's planes, mean over the last dims).
#pragma once
#include <cstdint>

namespace ember::cpu {

// out[i * os] = the sum of the k elements at x + i * ld, for i < rows. Eight lanes per row so the
// compiler vectorises the body, added pairwise at the end; rows are independent, so the core overlaps
// them (faster than one GEMM with a column of ones, whose packing dominated at these sizes).
template <typename T> void short_row_sums_dense(const T* x, int64_t ld, int64_t rows, int64_t k, T* out, int64_t os) {
  for (int64_t i = 0; i < rows; ++i, x += ld) {
    T acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= k; j += 8)
      for (int l = 0; l < 8; ++l) acc[l] += x[j + l];
    T t = T(0);
    for (; j < k; ++j) t += x[j];
    out[i * os] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t;
  }
}

}  // namespace ember::cpu
