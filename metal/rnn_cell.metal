// Fused recurrent cells (LSTM, GRU, Elman RNN): everything after the two gate GEMMs, forward and backward,
// for f32/f16/bf16 computed in float. One thread per (hidden unit, batch row); 2-D operands are read
// with unit column stride at their row strides, outputs are dense; the workspace is float.
#include <metal_stdlib>
using namespace metal;

// Must match the host's copy in cpp/metal/ops/rnn_cell.cpp.
struct RnnCellArgs {
  long rows, H;
  long ld[4];  // row strides of the 2-D operands: forward xg, hg, state; backward state, dh, dc
  long b_st;   // the bias' stride
  uint has_b;
  uint relu;
};

inline float sigm(float x) { return 1.0f / (1.0f + precise::exp(-x)); }

// Gate k's pre-activation xg + hg + b for unit j of a row.
template <typename T>
inline float gate(device const T* xr, device const T* hr, device const T* b, constant RnnCellArgs& a, long k) {
  const float bias = a.has_b ? float(b[k * a.b_st]) : 0.0f;
  return float(xr[k]) + float(hr[k]) + bias;
}

template <typename T>
kernel void lstm_cell_fwd(device const T* xg [[buffer(0)]], device const T* hg [[buffer(1)]],
                          device const T* b [[buffer(2)]], device const T* c [[buffer(3)]],
                          device T* h_out [[buffer(4)]], device T* c_out [[buffer(5)]],
                          device float* ws [[buffer(6)]], constant RnnCellArgs& a [[buffer(7)]],
                          uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  device const T* xr = xg + r * a.ld[0];
  device const T* hr = hg + r * a.ld[1];
  const float i = sigm(gate(xr, hr, b, a, j)), f = sigm(gate(xr, hr, b, a, H + j));
  const float g = precise::tanh(gate(xr, hr, b, a, 2 * H + j)), o = sigm(gate(xr, hr, b, a, 3 * H + j));
  const float cn = f * float(c[r * a.ld[2] + j]) + i * g;
  c_out[r * H + j] = T(cn);
  h_out[r * H + j] = T(o * precise::tanh(cn));
  device float* w = ws + r * 4 * H;
  w[j] = i;
  w[H + j] = f;
  w[2 * H + j] = g;
  w[3 * H + j] = o;
}

// torch's GRU: the reset gate scales W_hn h + b_hn, not h.
template <typename T>
kernel void gru_cell_fwd(device const T* xg [[buffer(0)]], device const T* hg [[buffer(1)]],
                         device const T* b [[buffer(2)]], device const T* h [[buffer(3)]],
                         device T* h_out [[buffer(4)]], device float* ws [[buffer(5)]],
                         constant RnnCellArgs& a [[buffer(6)]], uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  device const T* xr = xg + r * a.ld[0];
  device const T* hr = hg + r * a.ld[1];
  const float rg = sigm(gate(xr, hr, b, a, j)), u = sigm(gate(xr, hr, b, a, H + j));
  const float hn = float(hr[2 * H + j]) + (a.has_b ? float(b[(2 * H + j) * a.b_st]) : 0.0f);
  const float n = precise::tanh(float(xr[2 * H + j]) + rg * hn);
  h_out[r * H + j] = T(n + u * (float(h[r * a.ld[2] + j]) - n));
  device float* w = ws + r * 4 * H;
  w[j] = rg;
  w[H + j] = u;
  w[2 * H + j] = n;
  w[3 * H + j] = hn;
}

template <typename T>
kernel void rnn_cell_fwd(device const T* xg [[buffer(0)]], device const T* hg [[buffer(1)]],
                         device const T* b [[buffer(2)]], device T* h_out [[buffer(3)]],
                         device float* ws [[buffer(4)]], constant RnnCellArgs& a [[buffer(5)]],
                         uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  const float z = gate(xg + r * a.ld[0], hg + r * a.ld[1], b, a, j);
  const float y = a.relu ? (z < 0.0f ? 0.0f : z) : precise::tanh(z);  // relu lets NaN through, as torch's
  h_out[r * H + j] = T(y);
  ws[r * H + j] = y;
}

// Backward: the gate pre-activations' grads (dxg, dense (rows, 4H)) and the previous cell state's.
template <typename T>
kernel void lstm_cell_bwd(device const float* ws [[buffer(0)]], device const T* c [[buffer(1)]],
                          device const T* dh [[buffer(2)]], device const T* dc [[buffer(3)]],
                          device T* dxg [[buffer(4)]], device T* dc_prev [[buffer(5)]],
                          constant RnnCellArgs& a [[buffer(6)]], uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  device const float* w = ws + r * 4 * H;
  const float i = w[j], f = w[H + j], g = w[2 * H + j], o = w[3 * H + j];
  const float cp = float(c[r * a.ld[0] + j]);
  const float tc = precise::tanh(f * cp + i * g);
  const float gh = float(dh[r * a.ld[1] + j]);
  const float dct = float(dc[r * a.ld[2] + j]) + gh * o * (1.0f - tc * tc);
  device T* d = dxg + r * 4 * H;
  d[j] = T(dct * g * i * (1.0f - i));
  d[H + j] = T(dct * cp * f * (1.0f - f));
  d[2 * H + j] = T(dct * i * (1.0f - g * g));
  d[3 * H + j] = T(gh * tc * o * (1.0f - o));
  dc_prev[r * H + j] = T(dct * f);
}

// dxg and dhg differ in the n block (dhg's is scaled by r); dh_prev is the direct path z * dh.
template <typename T>
kernel void gru_cell_bwd(device const float* ws [[buffer(0)]], device const T* h [[buffer(1)]],
                         device const T* dh [[buffer(2)]], device T* dxg [[buffer(3)]], device T* dhg [[buffer(4)]],
                         device T* dh_prev [[buffer(5)]], constant RnnCellArgs& a [[buffer(6)]],
                         uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  device const float* w = ws + r * 4 * H;
  const float rg = w[j], u = w[H + j], n = w[2 * H + j], hn = w[3 * H + j];
  const float gh = float(dh[r * a.ld[1] + j]);
  const float dn = gh * (1.0f - u) * (1.0f - n * n);
  const float du = gh * (float(h[r * a.ld[0] + j]) - n) * u * (1.0f - u);
  const float dr = dn * hn * rg * (1.0f - rg);
  device T* dx = dxg + r * 3 * H;
  device T* dy = dhg + r * 3 * H;
  dx[j] = T(dr);
  dy[j] = T(dr);
  dx[H + j] = T(du);
  dy[H + j] = T(du);
  dx[2 * H + j] = T(dn);
  dy[2 * H + j] = T(dn * rg);
  dh_prev[r * H + j] = T(gh * u);
}

template <typename T>
kernel void rnn_cell_bwd(device const float* ws [[buffer(0)]], device const T* dh [[buffer(1)]],
                         device T* dxg [[buffer(2)]], constant RnnCellArgs& a [[buffer(3)]],
                         uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y, H = a.H;
  if (j >= H || r >= a.rows) return;
  const float y = ws[r * H + j], gh = float(dh[r * a.ld[1] + j]);
  dxg[r * H + j] = T(a.relu ? (y > 0.0f ? gh : 0.0f) : gh * (1.0f - y * y));
}

#define instantiate_rnn(tname, T)                                                                          \
  template [[host_name("lstm_cell_fwd_" #tname)]] [[kernel]] decltype(lstm_cell_fwd<T>) lstm_cell_fwd<T>; \
  template [[host_name("gru_cell_fwd_" #tname)]] [[kernel]] decltype(gru_cell_fwd<T>) gru_cell_fwd<T>;    \
  template [[host_name("rnn_cell_fwd_" #tname)]] [[kernel]] decltype(rnn_cell_fwd<T>) rnn_cell_fwd<T>;    \
  template [[host_name("lstm_cell_bwd_" #tname)]] [[kernel]] decltype(lstm_cell_bwd<T>) lstm_cell_bwd<T>; \
  template [[host_name("gru_cell_bwd_" #tname)]] [[kernel]] decltype(gru_cell_bwd<T>) gru_cell_bwd<T>;    \
  template [[host_name("rnn_cell_bwd_" #tname)]] [[kernel]] decltype(rnn_cell_bwd<T>) rnn_cell_bwd<T>;

instantiate_rnn(float32, float)
instantiate_rnn(float16, half)
instantiate_rnn(bfloat16, bfloat)
