// The pooling kernel families: max / avg / adaptive-avg pooling and its gradient (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Pooling (see PoolGeom, backend.h): x (n, c, h, w) through l -> (values (n, c, oh, ow), Max's int64
// indices when `with_indices`, else null).
struct Pool2d {
  static constexpr const char* kName = "pool2d";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, PoolKind kind, const Layout& l,
                                                    const PoolGeom& g, bool with_indices);
};

// Its gradient: gy, the output's gradient (n, c, oh, ow) through lg; ids: Max's indices (contiguous; one
// outside h*w adds nowhere), null otherwise. Returns dx (n, c, h, w).
struct Pool2dBwd {
  static constexpr const char* kName = "pool2d_bwd";
  using Fn = StoragePtr (*)(const BackendStorage& gy, PoolKind kind, const Layout& lg, const BackendStorage* ids,
                            const PoolGeom& g);
};

}  // namespace ember
