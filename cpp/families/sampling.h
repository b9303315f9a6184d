// multinomial's kernel family: category indices drawn per row of weights (see registry.h).
#pragma once
#include <cstdint>

#include "../backend.h"

namespace ember {

// num_samples category indices per row of the weights w through l (rows, n), already checked finite,
// non-negative and with a positive sum per row. Without replacement: the num_samples largest keys
// w_i / E_i in key order, E_i = -log(1 - u) for the uniform u of counter + r * n + i; with replacement:
// the category whose cumulative-sum interval holds u * sum for the uniform of counter + r * num_samples
// + j. Returns int64 (rows, num_samples), contiguous.
struct Multinomial {
  static constexpr const char* kName = "multinomial";
  using Fn = StoragePtr (*)(const BackendStorage& w, const Layout& l, int64_t num_samples, bool replacement,
                            uint64_t seed, uint64_t counter);
};

}  // namespace ember
