// The scans' kernel family: cumsum, cumprod, cummax, cummin along one dim (see registry.h).
#pragma once
#include <cstdint>
#include <tuple>

#include "../backend.h"

namespace ember {

// Scans along one dim (cumsum, cumprod, cummax, cummin).
enum class ScanOp : uint8_t { Sum, Prod, Max, Min, Count };
inline constexpr const char* kScanNames[(int)ScanOp::Count] = {"cumsum", "cumprod", "cummax", "cummin"};

// Scans every line of x (through l) along `dim`: out[i] combines the line's elements up to i (before i
// when `exclusive`; from the end when `reverse`). Sum/Prod of integers return int64 (wrapping), else the
// input dtype; Max/Min (never exclusive, checked by the seam) also return the int64 index of each
// running extreme (a NaN is taken and kept; ties move to the later position, torch's rule), null for
// Sum/Prod. Outputs contiguous of l's shape.
struct Scan {
  static constexpr const char* kName = "scan";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, ScanOp op, const Layout& l,
                                                    int64_t dim, bool exclusive, bool reverse);
};

}  // namespace ember
