// Winograd F(2x2, 3x3) on CPU: each 2x2 output tile is a 4x4 input patch d through V = B^T d B, 16
// per-frequency GEMMs U_f (o x c) . V_f (c x tiles) with U = G g G^T, then Y = A^T M A; 2.25x fewer
// multiplies than im2col. Blocks of tile rows keep V and M in L2; blocks are threaded over the pool.
#include "cpu/winograd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/parallel.h"

namespace ember::cpu {
namespace {

// Per-thread scratch that only grows (the pool's threads live as long as the process).
float* scratch(int slot, size_t n) {
  static thread_local std::vector<float> buf[2];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// U[g][f][j][i] = (G k G^T)[f / 4][f % 4] for the 3x3 kernel k linking in-channel i to out-channel j.
void transform_weights(const float* wt, bool adjoint, int64_t groups, int64_t c, int64_t o, float* u) {
  parallel_for(groups * o, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, c)), [&](int64_t lo, int64_t hi) {
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t g = gj / o, j = gj % o;
      for (int64_t i = 0; i < c; ++i) {
        const float* k = adjoint ? wt + ((g * c + i) * o + j) * 9 : wt + ((g * o + j) * c + i) * 9;
        float kk[3][3], t[4][3];
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) kk[a][b] = adjoint ? k[(2 - a) * 3 + (2 - b)] : k[a * 3 + b];
        for (int b = 0; b < 3; ++b) {
          t[0][b] = kk[0][b];
          t[1][b] = 0.5f * (kk[0][b] + kk[1][b] + kk[2][b]);
          t[2][b] = 0.5f * (kk[0][b] - kk[1][b] + kk[2][b]);
          t[3][b] = kk[2][b];
        }
        for (int a = 0; a < 4; ++a) {
          const float r[4] = {t[a][0], 0.5f * (t[a][0] + t[a][1] + t[a][2]), 0.5f * (t[a][0] - t[a][1] + t[a][2]),
                              t[a][2]};
          for (int b = 0; b < 4; ++b) u[((g * 16 + a * 4 + b) * o + j) * c + i] = r[b];
        }
      }
    }
  });
}

#if defined(__GNUC__) && !defined(__clang__)
#define EMBER_IVDEP _Pragma("GCC ivdep")
#else
#define EMBER_IVDEP
#endif

// B across a row, for tx neighbouring tiles at once: ev / od are the row's even / odd columns.
inline void cols4(const float* __restrict ev, const float* __restrict od, float* __restrict v0, float* __restrict v1,
                  float* __restrict v2, float* __restrict v3, int64_t tx) {
  EMBER_IVDEP for (int64_t t = 0; t < tx; ++t) {
    v0[t] = ev[t] - ev[t + 1];
    v1[t] = od[t] + ev[t + 1];
    v2[t] = ev[t + 1] - od[t];
    v3[t] = od[t] - od[t + 1];
  }
}

// V's columns [t0, t0 + tx) for tile row ty of one channel: the four patch rows padded to pw2 = 2 tx + 2
// columns, B^T down the rows (whole rows, so it vectorises), then B across each row split into its
// even / odd columns (the patches of neighbouring tiles overlap by two columns).
void input_tile_row(const float* xc, int64_t sy, int64_t sx, int64_t h, int64_t w, int64_t ty, int64_t ph,
                    int64_t pw, int64_t tx, float* rows, float* v, int64_t c, int64_t tb, int64_t t0) {
  const int64_t pw2 = 2 * tx + 2;
  float* p[4] = {rows, rows + pw2, rows + 2 * pw2, rows + 3 * pw2};
  const int64_t klo = std::clamp<int64_t>(pw, 0, pw2), khi = std::clamp<int64_t>(pw + w, klo, pw2);
  for (int i = 0; i < 4; ++i) {
    const int64_t iy = 2 * ty - ph + i;
    if (iy < 0 || iy >= h || khi == klo) {
      std::fill(p[i], p[i] + pw2, 0.0f);
      continue;
    }
    const float* src = xc + iy * sy + (klo - pw) * sx;
    std::fill(p[i], p[i] + klo, 0.0f);
    std::fill(p[i] + khi, p[i] + pw2, 0.0f);
    if (sx == 1) {
      std::memcpy(p[i] + klo, src, (size_t)(khi - klo) * sizeof(float));
    } else {
      for (int64_t k = klo; k < khi; ++k) p[i][k] = src[(k - klo) * sx];
    }
  }
  float* __restrict q = rows + 4 * pw2;  // 4 rows of B^T d, then the even / odd halves of one of them
  float* __restrict ev = q + 4 * pw2;
  float* __restrict od = ev + tx + 1;
  EMBER_IVDEP for (int64_t k = 0; k < pw2; ++k) {
    const float a = p[0][k], b = p[1][k], cc = p[2][k], d = p[3][k];
    q[k] = a - cc;
    q[pw2 + k] = b + cc;
    q[2 * pw2 + k] = cc - b;
    q[3 * pw2 + k] = b - d;
  }
  for (int r = 0; r < 4; ++r) {
    const float* qr = q + r * pw2;
    EMBER_IVDEP for (int64_t k = 0; k <= tx; ++k) {
      ev[k] = qr[2 * k];
      od[k] = qr[2 * k + 1];
    }
    cols4(ev, od, v + ((r * 4 + 0) * c) * tb + t0, v + ((r * 4 + 1) * c) * tb + t0, v + ((r * 4 + 2) * c) * tb + t0,
          v + ((r * 4 + 3) * c) * tb + t0, tx);
  }
}

// Output rows 2 ty and 2 ty + 1 of one channel from M's columns [t0, t0 + tx): Y = A^T M A, plus bias.
void output_tile_row(const float* m, int64_t o, int64_t tb, int64_t t0, int64_t tx, float bias, float* tmp,
                     float* yrow0, float* yrow1, int64_t ow) {
  float* __restrict a = tmp;            // a[i]: M[i][0] + M[i][1] + M[i][2]
  float* __restrict b = tmp + 4 * tx;   // b[i]: M[i][1] - M[i][2] - M[i][3]
  for (int i = 0; i < 4; ++i) {
    const float* m0 = m + ((i * 4 + 0) * o) * tb + t0;
    const float* m1 = m + ((i * 4 + 1) * o) * tb + t0;
    const float* m2 = m + ((i * 4 + 2) * o) * tb + t0;
    const float* m3 = m + ((i * 4 + 3) * o) * tb + t0;
    EMBER_IVDEP for (int64_t t = 0; t < tx; ++t) {
      a[i * tx + t] = m0[t] + m1[t] + m2[t];
      b[i * tx + t] = m1[t] - m2[t] - m3[t];
    }
  }
  float* __restrict y00 = tmp + 8 * tx;
  float* __restrict y01 = y00 + tx;
  float* __restrict y10 = y01 + tx;
  float* __restrict y11 = y10 + tx;
  EMBER_IVDEP for (int64_t t = 0; t < tx; ++t) {
    y00[t] = a[t] + a[tx + t] + a[2 * tx + t] + bias;
    y01[t] = b[t] + b[tx + t] + b[2 * tx + t] + bias;
    y10[t] = a[tx + t] - a[2 * tx + t] - a[3 * tx + t] + bias;
    y11[t] = b[tx + t] - b[2 * tx + t] - b[3 * tx + t] + bias;
  }
  const int64_t full = ow / 2;
  EMBER_IVDEP for (int64_t t = 0; t < full; ++t) {
    yrow0[2 * t] = y00[t];
    yrow0[2 * t + 1] = y01[t];
  }
  if (ow & 1) yrow0[ow - 1] = y00[full];
  if (!yrow1) return;
  EMBER_IVDEP for (int64_t t = 0; t < full; ++t) {
    yrow1[2 * t] = y10[t];
    yrow1[2 * t + 1] = y11[t];
  }
  if (ow & 1) yrow1[ow - 1] = y10[full];
}

}  // namespace

bool winograd_worth(int64_t c, int64_t o, int64_t oh, int64_t ow) {
  // Below these the transforms (linear in c + o) outweigh the GEMM flops they save (c * o).
  return c >= 16 && o >= 16 && oh >= 4 && ow >= 4;
}

void winograd_conv3x3(const WinoInput& x, int64_t n, int64_t groups, int64_t c, int64_t h, int64_t w, const float* wt,
                      bool adjoint, int64_t o, int64_t ph, int64_t pw, int64_t oh, int64_t ow, const float* bias,
                      int64_t bias_stride, float* y) {
  if (n * groups * o * oh * ow == 0) return;
  const int64_t ty_n = (oh + 1) / 2, tx = (ow + 1) / 2;
  std::vector<float> u((size_t)(groups * 16 * o * c));
  transform_weights(wt, adjoint, groups, c, o, u.data());
  // Tile rows per block: V (16 c tb) and M (16 o tb) within ~1 MiB of L2, and enough blocks for the pool.
  int64_t rb = std::clamp<int64_t>(16384 / std::max<int64_t>(1, c + o) / tx, 1, ty_n);
  const int64_t want = 4 * get_num_threads();
  while (rb > 1 && n * groups * ((ty_n + rb - 1) / rb) < want) rb = (rb + 1) / 2;
  const int64_t blocks = (ty_n + rb - 1) / rb, tbmax = rb * tx;
  parallel_for(n * groups * blocks, 1, [&](int64_t lo, int64_t hi) {
    float* v = scratch(0, (size_t)(16 * (c + o) * tbmax + 12 * (2 * tx + 2) + 4 * (tx + 1)));
    float* m = v + 16 * c * tbmax;
    float* rows = m + 16 * o * tbmax;
    for (int64_t unit = lo; unit < hi; ++unit) {
      const int64_t ni = unit / (groups * blocks), gi = unit / blocks % groups, blk = unit % blocks;
      const int64_t ty0 = blk * rb, ty1 = std::min(ty_n, ty0 + rb), tb = (ty1 - ty0) * tx;
      for (int64_t i = 0; i < c; ++i) {
        const float* xc = x.p + ni * x.st[0] + (gi * c + i) * x.st[1];
        for (int64_t ty = ty0; ty < ty1; ++ty)
          input_tile_row(xc, x.st[2], x.st[3], h, w, ty, ph, pw, tx, rows, v + i * tb, c, tb, (ty - ty0) * tx);
      }
      for (int f = 0; f < 16; ++f)
        gemm_rowmajor(false, false, o, tb, c, u.data() + (gi * 16 + f) * o * c, c, v + f * c * tb, tb, 0.0f,
                      m + f * o * tb, tb);
      for (int64_t j = 0; j < o; ++j) {
        const float bj = bias ? bias[(gi * o + j) * bias_stride] : 0.0f;
        float* yj = y + ((ni * groups + gi) * o + j) * oh * ow;
        for (int64_t ty = ty0; ty < ty1; ++ty) {
          float* r1 = 2 * ty + 1 < oh ? yj + (2 * ty + 1) * ow : nullptr;
          output_tile_row(m + j * tb, o, tb, (ty - ty0) * tx, tx, bj, rows, yj + 2 * ty * ow, r1, ow);
        }
      }
    }
  });
}

}  // namespace ember::cpu
