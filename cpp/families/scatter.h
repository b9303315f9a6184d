// scatter_reduce's kernel family: src combined into a tensor at indices along one dim (see registry.h).
#pragma once
#include <cstdint>

#include "../backend.h"

namespace ember {

// How scatter_reduce combines src's elements with the target at their index: Set is plain scatter (a
// repeated index keeps the last element in index order); Max/Min are torch's amax/amin.
enum class ScatterOp : uint8_t { Set, Sum, Prod, Mean, Max, Min, Count };
inline constexpr const char* kScatterNames[(int)ScatterOp::Count] = {"scatter", "sum", "prod", "mean", "amax",
                                                                    "amin"};

// In place on out (a fresh dense copy, through l): for every position e of the indices' shape, the
// element at e with coords[dim] = ids[e] combines with src[e] (src through sl, of the indices' shape) by
// `op`, in index order along dim. Without `include_self` a position any index names starts from src
// alone; Mean divides by the count of elements combined (self included when include_self; floor
// division for integers). Lines along dim are independent: backends may split them across threads.
// The kernel checks each index against l's dim (raising "[scatter] ..." / "[scatter_reduce] ...").
struct ScatterReduce {
  static constexpr const char* kName = "scatter_reduce";
  using Fn = void (*)(BackendStorage& out, ScatterOp op, const Layout& l, const BackendStorage& ids,
                      const Layout& il, const BackendStorage& src, const Layout& sl, int64_t dim,
                      bool include_self);
};

}  // namespace ember
