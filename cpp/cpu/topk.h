// Top-k selection of one contiguous line of keys on the CPU (cpu/topk.cpp), shared by topk and multinomial.
#pragma once
#include <cstdint>
#include <vector>

namespace ember::cpu {

// Writes into ids[0..k) the positions of the k first keys of x[0..n) in sort's order (largest first when
// `largest`, NaN the largest value, equal keys in index order), and their keys into vals when not null.
// `work` is the caller's scratch, reused across lines.
template <typename K> struct TopkItem {
  K key;
  int64_t idx;
};
void select_topk(const float* x, int64_t n, int64_t k, bool largest, int64_t* ids, float* vals,
                 std::vector<TopkItem<float>>& work);
void select_topk(const double* x, int64_t n, int64_t k, bool largest, int64_t* ids, double* vals,
                 std::vector<TopkItem<double>>& work);

}  // namespace ember::cpu
