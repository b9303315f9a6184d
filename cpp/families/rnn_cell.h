// The fused recurrent cells' kernel family (LSTM, GRU, Elman RNN): the forward and backward every device
// registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward (see cpp/fused.h's rnn_cell_fwd): xg (N, G) through l; hg (N, G); b (G,) optional; s = c
// (LSTM) or h (GRU), (N, H), null for RNN; 2-D operands have unit column stride. Returns (h', c' (LSTM,
// else null), workspace (N, rnn_ws_width) in the stats dtype). The seam (fused_rnn.cpp) has validated
// every argument.
struct RnnCellFwd {
  static constexpr const char* kName = "rnn_cell";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& xg, const Layout& l,
                                                                RnnCell kind, const BackendStorage& hg,
                                                                const Layout& lhg, const BackendStorage* b,
                                                                const Layout* lb, const BackendStorage* s,
                                                                const Layout* ls);
};

// Backward: dh (N, H) through l; ws: the forward's workspace (dense); s as the forward's; dc (N, H) for
// LSTM. Returns (dxg, dhg (GRU, else null: equal to dxg), ds (dc or the direct dh), or null).
struct RnnCellBwd {
  static constexpr const char* kName = "rnn_cell_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& dh, const Layout& l,
                                                                RnnCell kind, const BackendStorage& ws,
                                                                const Layout& lws, const BackendStorage* s,
                                                                const Layout* ls, const BackendStorage* dc,
                                                                const Layout* ldc);
};

}  // namespace ember
