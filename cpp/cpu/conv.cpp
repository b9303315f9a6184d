// Convolution on CPU: im2col / col2im (unfold / fold), and conv2d's three directions as GEMMs over column
// tiles built in cache (the whole column matrix is never formed), threaded over images x groups x tiles.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/gemm.h"
#include "cpu/packed_gemm.h"
#include "cpu/parallel.h"
#include "cpu/winograd.h"
#include "families/conv.h"
#include "registry.h"

namespace ember::cpu {

void pack_a(const float* a, int64_t lda, bool transposed, int64_t m, int64_t k, int mr, float* ap) {
  for (int64_t i0 = 0; i0 < m; i0 += mr, ap += k * mr) {
    const int64_t rows = std::min<int64_t>(mr, m - i0);
    for (int64_t kk = 0; kk < k; ++kk) {
      float* d = ap + kk * mr;
      if (transposed) {
        std::memcpy(d, a + kk * lda + i0, (size_t)rows * sizeof(float));
      } else {
        for (int64_t r = 0; r < rows; ++r) d[r] = a[(i0 + r) * lda + kk];
      }
      std::fill(d + rows, d + mr, 0.0f);
    }
  }
}

void pack_b(const float* b, int64_t ldb, int64_t k, int64_t n, int nr, float* bp) {
  for (int64_t j0 = 0; j0 < n; j0 += nr, bp += k * nr) {
    const int64_t cols = std::min<int64_t>(nr, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      std::memcpy(bp + kk * nr, b + kk * ldb + j0, (size_t)cols * sizeof(float));
      std::fill(bp + kk * nr + cols, bp + (kk + 1) * nr, 0.0f);
    }
  }
}

namespace {

// The outputs o in [0, n_out) whose input index o * stride - pad + off lies in [0, n_in): one range,
// so the inner loops need no bounds test.
inline void valid_range(int64_t n_in, int64_t n_out, int64_t stride, int64_t pad, int64_t off, int64_t& lo,
                        int64_t& hi) {
  const int64_t first = pad - off;  // o * stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = n_in - 1 + pad - off;  // o * stride <= last
  hi = last < 0 ? 0 : std::min(n_out, last / stride + 1);
  lo = std::min(lo, hi);
}

// One (image, channel) plane per task: it writes the plane's kh*kw rows of the column matrix and
// nothing else, so planes run in parallel without sharing a cache line but at their edges.
template <typename T>
void im2col_plane(const T* x, int64_t sh_in, int64_t sw_in, const ConvGeom& g, T* col) {
  const int64_t L = g.oh * g.ow;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj, col += L) {
      int64_t ylo, yhi, xlo, xhi;
      valid_range(g.h, g.oh, g.sh, g.ph, ki * g.dh, ylo, yhi);
      valid_range(g.w, g.ow, g.sw, g.pw, kj * g.dw, xlo, xhi);
      std::fill(col, col + ylo * g.ow, T{});
      std::fill(col + yhi * g.ow, col + L, T{});
      for (int64_t oy = ylo; oy < yhi; ++oy) {
        T* row = col + oy * g.ow;
        // Offsets as integers: the window's first column may lie in the padding, before the plane.
        const int64_t base = (oy * g.sh - g.ph + ki * g.dh) * sh_in + (kj * g.dw - g.pw) * sw_in;
        const int64_t step = g.sw * sw_in;
        std::fill(row, row + xlo, T{});
        std::fill(row + xhi, row + g.ow, T{});
        if (step == 1) {
          if (xhi > xlo) std::memcpy(row + xlo, x + (base + xlo), (size_t)(xhi - xlo) * sizeof(T));
        } else {
          for (int64_t ox = xlo; ox < xhi; ++ox) row[ox] = x[base + ox * step];
        }
      }
    }
}

// The adjoint of im2col_plane: adds the plane's kh*kw rows back into the (zeroed) plane.
template <typename T> void col2im_plane(const T* col, const ConvGeom& g, T* x) {
  const int64_t L = g.oh * g.ow;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj, col += L) {
      int64_t ylo, yhi, xlo, xhi;
      valid_range(g.h, g.oh, g.sh, g.ph, ki * g.dh, ylo, yhi);
      valid_range(g.w, g.ow, g.sw, g.pw, kj * g.dw, xlo, xhi);
      for (int64_t oy = ylo; oy < yhi; ++oy) {
        const T* row = col + oy * g.ow;
        const int64_t base = (oy * g.sh - g.ph + ki * g.dh) * g.w + (kj * g.dw - g.pw);
        for (int64_t ox = xlo; ox < xhi; ++ox) x[base + ox * g.sw] += row[ox];
      }
    }
}

// Planes per task: enough work per chunk that the pool's hand-off is noise.
int64_t plane_grain(const ConvGeom& g) {
  const int64_t per_plane = std::max<int64_t>(1, g.kh * g.kw * g.oh * g.ow);
  return std::max<int64_t>(1, 32768 / per_plane);
}

template <typename T> StoragePtr im2col_typed(const CpuStorage& s, const Layout& l, const ConvGeom& g, DType dt) {
  auto out = new_cpu(dt, g.n * g.c * g.kh * g.kw * g.oh * g.ow);
  const T* x = s.data<T>() + l.offset();
  T* col = out->data<T>();
  const auto& st = l.stride();
  const int64_t plane = g.kh * g.kw * g.oh * g.ow;
  parallel_for(g.n * g.c, plane_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t n = p / g.c, c = p % g.c;
      im2col_plane<T>(x + n * st[0] + c * st[1], st[2], st[3], g, col + p * plane);
    }
  });
  return out;
}

template <typename T> StoragePtr col2im_typed(const T* col, const ConvGeom& g, DType dt) {
  auto out = new_cpu(dt, g.n * g.c * g.h * g.w, /*zeroed=*/true);
  T* x = out->data<T>();
  const int64_t plane = g.kh * g.kw * g.oh * g.ow;
  parallel_for(g.n * g.c, plane_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) col2im_plane<T>(col + p * plane, g, x + p * g.h * g.w);
  });
  return out;
}


// ------------------------------------------------------------------------------ conv2d as tiled GEMMs
// A tile is the output positions [p0, p1) of one image (flattened oy * ow + ox) and the column rows of a
// channel range: at most kTileBytes, so it stays in L2 between being written and being read by the GEMM.
constexpr int64_t kTileBytes = int64_t(1) << 20;
constexpr int64_t kMaxTile = 512;  // positions: wide enough for the GEMM, small enough to spread over the pool

template <typename T, int Slot = 0> T* tile_scratch(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Positions per tile for column rows of k entries: a multiple of 16, at most max_tile and the image's
// positions, about `bytes` of columns, and small enough that `outer` (images x groups) times the tiles
// make at least `items` work items.
int64_t tile_positions(int64_t k, int64_t L, size_t elem, int64_t outer, int64_t bytes = kTileBytes,
                       int64_t max_tile = kMaxTile, int64_t items = 8) {
  int64_t nb = std::max<int64_t>(64, bytes / (int64_t)elem / std::max<int64_t>(1, k)) / 16 * 16;
  nb = std::min(nb, max_tile);
  const int64_t want = (items + outer - 1) / std::max<int64_t>(1, outer);
  if ((L + nb - 1) / nb < want) nb = std::max<int64_t>(16, ((L + want - 1) / want + 15) / 16 * 16);
  return std::min(L, nb);
}

// The valid output columns [lo, hi) of output row oy's part [oxa, oxe) for window column kj.
struct RowSeg {
  int64_t oxa, oxe, lo, hi;
};
inline RowSeg row_seg(int64_t oy, int64_t p0, int64_t p1, int64_t ow, int64_t xlo, int64_t xhi) {
  const int64_t oxa = std::max(p0, oy * ow) - oy * ow, oxe = std::min(p1, (oy + 1) * ow) - oy * ow;
  const int64_t lo = std::min(std::max(xlo, oxa), oxe);
  return {oxa, oxe, lo, std::max(std::min(xhi, oxe), lo)};
}

// out[i] = src[2 i] for i < n: stride-2 windows' row gather.
template <typename T> inline void gather2(const T* __restrict src, int64_t n, T* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = src[2 * i];
}
// dst[2 i] += src[i] for i < n: stride-2 windows' row scatter, the adjoint of gather2.
template <typename T> inline void scatter_add2(const T* __restrict src, int64_t n, T* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[2 * i] += src[i];
}

// Copies one column row (n positions) into its slots of the B panels (nr columns each, k rows apart).
template <int NR, typename T> void to_panels(const T* row, int64_t n, int64_t k, T* dst) {
  int64_t j = 0;
  for (; j + NR <= n; j += NR, dst += k * NR) std::memcpy(dst, row + j, NR * sizeof(T));
  if (j < n) std::memcpy(dst, row + j, (size_t)(n - j) * sizeof(T));
}

// Column rows of channels [c0, c1) for positions [p0, p1) of one image (x through strides sc, sy, sx):
// row kk = (c, ki, kj) holds the input each window reads at (ki, kj), zero in the padding. With nr =
// p1 - p0 the rows form the plain (rows x positions) matrix; any other nr writes the packed GEMM's B
// panels instead (cpu/packed_gemm.h), each row built whole first so its gathers run over whole rows.
template <typename T>
void im2col_tile(const T* xn, int64_t sc, int64_t sy, int64_t sx, const ConvGeom& g, int64_t c0, int64_t c1,
                 int64_t p0, int64_t p1, int64_t nr, T* col) {
  const int64_t nb = p1 - p0, rows = (c1 - c0) * g.kh * g.kw, oy0 = p0 / g.ow, oy1 = (p1 - 1) / g.ow;
  T* tmp = nr != nb ? tile_scratch<T, 2>((size_t)nb) : nullptr;
  int64_t kk = 0;
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = xn + c * sc;
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj, ++kk) {
        T* line = tmp ? tmp : col + kk * nb;
        int64_t ylo, yhi, xlo, xhi;
        valid_range(g.h, g.oh, g.sh, g.ph, ki * g.dh, ylo, yhi);
        valid_range(g.w, g.ow, g.sw, g.pw, kj * g.dw, xlo, xhi);
        for (int64_t oy = oy0; oy <= oy1; ++oy) {
          const RowSeg r = row_seg(oy, p0, p1, g.ow, xlo, xhi);
          T* row = line + (oy * g.ow + r.oxa - p0);  // row[ox - oxa] is position (oy, ox)
          if (oy < ylo || oy >= yhi) {
            std::fill(row, row + (r.oxe - r.oxa), T{});
            continue;
          }
          std::fill(row, row + (r.lo - r.oxa), T{});
          std::fill(row + (r.hi - r.oxa), row + (r.oxe - r.oxa), T{});
          // Offsets as integers: the window's first column may lie in the padding, before the plane.
          const int64_t base = (oy * g.sh - g.ph + ki * g.dh) * sy + (kj * g.dw - g.pw) * sx, step = g.sw * sx;
          T* out = row - r.oxa + r.lo;
          if (step == 1) {
            if (r.hi > r.lo) std::memcpy(out, xc + (base + r.lo), (size_t)(r.hi - r.lo) * sizeof(T));
          } else if (step == 2) {  // a constant stride lets the compiler gather with shuffles
            gather2(xc + (base + 2 * r.lo), r.hi - r.lo, out);
          } else {
            for (int64_t ox = r.lo; ox < r.hi; ++ox) *out++ = xc[base + ox * step];
          }
        }
        if (!tmp) continue;
        T* dst = col + kk * nr;
        if (nr == 16) to_panels<16>(tmp, nb, rows, dst);
        else if (nr == 32) to_panels<32>(tmp, nb, rows, dst);
        else if (nr == 8) to_panels<8>(tmp, nb, rows, dst);
        else
          for (int64_t j = 0; j < nb; j += nr)
            std::memcpy(dst + j * rows, tmp + j, (size_t)std::min(nr, nb - j) * sizeof(T));
      }
  }
}

// The adjoint of im2col_tile: adds the tile's rows into the dense (h, w) planes of channels [c0, c1).
template <typename T>
void col2im_tile(const T* col, const ConvGeom& g, int64_t c0, int64_t c1, int64_t p0, int64_t p1, T* xn) {
  const int64_t nb = p1 - p0, oy0 = p0 / g.ow, oy1 = (p1 - 1) / g.ow;
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = xn + c * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj, col += nb) {
        int64_t ylo, yhi, xlo, xhi;
        valid_range(g.h, g.oh, g.sh, g.ph, ki * g.dh, ylo, yhi);
        valid_range(g.w, g.ow, g.sw, g.pw, kj * g.dw, xlo, xhi);
        for (int64_t oy = std::max(oy0, ylo); oy <= std::min(oy1, yhi - 1); ++oy) {
          const RowSeg r = row_seg(oy, p0, p1, g.ow, xlo, xhi);
          if (r.hi <= r.lo) continue;
          const T* row = col + (oy * g.ow + r.lo - p0);
          const int64_t base = (oy * g.sh - g.ph + ki * g.dh) * g.w + (kj * g.dw - g.pw);
          T* dst = xc + (base + r.lo * g.sw);
          if (g.sw == 1) {
            for (int64_t i = 0; i < r.hi - r.lo; ++i) dst[i] += row[i];
          } else if (g.sw == 2) {
            scatter_add2(row, r.hi - r.lo, dst);
          } else {
            for (int64_t i = 0; i < r.hi - r.lo; ++i) dst[i * g.sw] += row[i];
          }
        }
      }
  }
}

// A 1x1 window with stride 1 and no padding reads the input itself as the column matrix.
bool pointwise(const ConvGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && g.oh == g.h && g.ow == g.w;
}

// A stride-1, undilated 3x3 window over channel counts that make Winograd F(2x2, 3x3) pay (f32 only:
// f64 stays the exact im2col reference, and f16 / bf16 already run in f32).
template <typename T> bool use_winograd(const ConvGeom& g, int64_t c, int64_t o, int64_t oh, int64_t ow) {
  return std::is_same_v<T, float> && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
         winograd_worth(c, o, oh, ow);
}

// An operand of the kernels in the compute type T: its data and 4-D strides (a copy when the dtype differs).
template <typename T> struct Op4 {
  StoragePtr keep;
  const T* p;
  int64_t st[4];
};
template <typename T> Op4<T> op4(const CpuStorage& s, const Layout& l, DType ct, bool dense) {
  Op4<T> o;
  if (s.dtype() != ct || (dense && !(l.is_contiguous()))) {
    o.keep = s.to_dtype(l, ct);
    o.p = as_cpu(*o.keep).template data<T>();
    const Layout cl = Layout::contiguous(l.shape());
    for (int d = 0; d < 4; ++d) o.st[d] = d < cl.ndim() ? cl.stride()[d] : 1;
  } else {
    o.p = s.data<T>() + l.offset();
    for (int d = 0; d < 4; ++d) o.st[d] = d < l.ndim() ? l.stride()[d] : 1;
  }
  return o;
}
// A (n, c, h, w) operand whose planes BLAS can read directly, else a dense copy.
template <typename T> Op4<T> op4_planes(const CpuStorage& s, const Layout& l, DType ct) {
  Op4<T> o = op4<T>(s, l, ct, false);
  const int64_t h = l.shape()[2], w = l.shape()[3];
  // position oy * w + ox must sit at unit stride: BLAS then reads (channels, positions) with ld = st[1]
  const bool ok = (w == 1 || o.st[3] == 1) && (h == 1 || o.st[2] == (w == 1 ? 1 : w)) && o.st[1] >= h * w &&
                  o.st[1] <= INT32_MAX;
  return ok ? o : op4<T>(s, l, ct, true);
}

// Whether the float32 tiled paths take the packed GEMM (cpu/packed_gemm.h): EMBER_CONV_GEMM=packed|blas,
// read per call so tests can run both, else this ISA's default.
bool use_packed_gemm() {
  const char* e = std::getenv("EMBER_CONV_GEMM");
  if (e && !std::strcmp(e, "packed")) return true;
  if (e && !std::strcmp(e, "blas")) return false;
  return packed_gemm().preferred;
}

// conv2d forward in float32 through the packed GEMM: each group's weights packed once per call, each
// tile's columns written straight into B panels, the bias loaded as C's starting value.
void conv_fwd_packed(const Op4<float>& X, const float* W, const Op4<float>* B, const ConvGeom& g, int64_t groups,
                     int64_t og, int64_t cg, float* yp) {
  const PackedGemm& pg = packed_gemm();
  const int64_t K = cg * g.kh * g.kw, L = g.oh * g.ow, c_out = og * groups, wpg = panels(og, pg.mr) * pg.mr * K;
  // The calling thread's scratch, packed by the pool one row panel per item: a fresh buffer per call
  // would cost its page faults, and a serial pack would not scale with the threads.
  float* wp = tile_scratch<float, 3>((size_t)(groups * wpg));
  const int64_t mp = panels(og, pg.mr);
  parallel_for(groups * mp, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t gi = u / mp, i0 = u % mp * pg.mr;
      pack_a(W + (gi * og + i0) * K, K, false, std::min<int64_t>(pg.mr, og - i0), K, pg.mr, wp + gi * wpg + i0 * K);
    }
  });
  int64_t nb = tile_positions(K, L, sizeof(float), g.n * groups);
  nb = std::min(L, (nb + pg.nr - 1) / pg.nr * pg.nr);  // tiles of whole panels
  const int64_t tiles = (L + nb - 1) / nb;
  parallel_for(g.n * groups * tiles, 1, [&](int64_t lo, int64_t hi) {
    float* col = tile_scratch<float>((size_t)(panels(nb, pg.nr) * pg.nr * K));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t n = u / (groups * tiles), gi = u / tiles % groups, p0 = u % tiles * nb, p1 = std::min(L, p0 + nb);
      im2col_tile(X.p + n * X.st[0] + gi * cg * X.st[1], X.st[1], X.st[2], X.st[3], g, 0, cg, p0, p1, pg.nr, col);
      float* yt = yp + (n * c_out + gi * og) * L + p0;
      if (B)
        for (int64_t o = 0; o < og; ++o) std::fill(yt + o * L, yt + o * L + (p1 - p0), B->p[(gi * og + o) * B->st[0]]);
      pg.run(wp + gi * wpg, col, og, p1 - p0, K, yt, L, B != nullptr);
    }
  });
}

template <typename T>
StoragePtr conv_fwd(const CpuStorage& x, const Layout& lx, const CpuStorage& w, const Layout& lw, const CpuStorage* b,
                    const Layout* lb, const ConvGeom& g, int64_t groups, DType ct) {
  const int64_t c_out = lw.shape()[0], og = c_out / groups, cg = g.c / groups, K = cg * g.kh * g.kw;
  const int64_t L = g.oh * g.ow;
  auto y = new_cpu(ct, g.n * c_out * L);
  if (y->numel() == 0) return y;
  const Op4<T> W = op4<T>(w, lw, ct, true);
  const Op4<T> B1 = b ? op4<T>(*b, *lb, ct, true) : Op4<T>{};
  const bool direct = pointwise(g);
  const Op4<T> X = direct ? op4_planes<T>(x, lx, ct) : op4<T>(x, lx, ct, false);
  T* yp = y->data<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (use_winograd<T>(g, cg, og, g.oh, g.ow)) {
      winograd_conv3x3({X.p, {X.st[0], X.st[1], X.st[2], X.st[3]}}, g.n, groups, cg, g.h, g.w, W.p, false, og, g.ph,
                       g.pw, g.oh, g.ow, b ? B1.p : nullptr, b ? B1.st[0] : 0, yp);
      return y;
    }
    if (!direct && K > 0 && use_packed_gemm()) {
      conv_fwd_packed(X, W.p, b ? &B1 : nullptr, g, groups, og, cg, yp);
      return y;
    }
  }
  const int64_t nb = tile_positions(direct ? 0 : K, L, sizeof(T), g.n * groups), tiles = (L + nb - 1) / nb;
  (void)get_num_threads();  // the pool sets BLAS to one thread before any GEMM runs
  parallel_for(g.n * groups * tiles, 1, [&](int64_t lo, int64_t hi) {
    T* col = direct ? nullptr : tile_scratch<T>((size_t)(K * nb));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t n = u / (groups * tiles), gi = u / tiles % groups, p0 = u % tiles * nb, p1 = std::min(L, p0 + nb);
      const T* xn = X.p + n * X.st[0] + gi * cg * X.st[1];
      T* yt = yp + (n * c_out + gi * og) * L + p0;
      if (K == 0) {
        for (int64_t o = 0; o < og; ++o) std::fill(yt + o * L, yt + o * L + (p1 - p0), T{});
      } else if (direct) {
        gemm_rowmajor(false, false, og, p1 - p0, K, W.p + gi * og * K, K, xn + p0, X.st[1], T(0), yt, L);
      } else {
        im2col_tile(xn, X.st[1], X.st[2], X.st[3], g, 0, cg, p0, p1, p1 - p0, col);
        gemm_rowmajor(false, false, og, p1 - p0, K, W.p + gi * og * K, K, col, p1 - p0, T(0), yt, L);
      }
      if (b)
        for (int64_t o = 0; o < og; ++o) {
          const T bo = B1.p[(gi * og + o) * B1.st[0]];
          for (T *q = yt + o * L, *e = q + (p1 - p0); q < e; ++q) *q += bo;
        }
    }
  });
  return y;
}

template <typename T>
StoragePtr conv_bwd_input(const CpuStorage& gy, const Layout& lg, const CpuStorage& w, const Layout& lw,
                          const ConvGeom& g, int64_t groups, DType ct) {
  const int64_t c_out = lw.shape()[0], og = c_out / groups, cg = g.c / groups, khw = g.kh * g.kw;
  const int64_t L = g.oh * g.ow, HW = g.h * g.w;
  const bool direct = pointwise(g), wino = use_winograd<T>(g, og, cg, g.h, g.w);
  auto dx = new_cpu(ct, g.n * g.c * HW, /*zeroed=*/(!direct && !wino) || og == 0);
  if (dx->numel() == 0 || og == 0) return dx;
  const Op4<T> W = op4<T>(w, lw, ct, true);
  if constexpr (std::is_same_v<T, float>) {
    // The input gradient of a stride-1 3x3 conv is one too: gy correlated with the flipped, transposed
    // kernel, padded by 2 - pad before each dim (gy read through any strides).
    if (wino) {
      const Op4<T> G = op4<T>(gy, lg, ct, false);
      winograd_conv3x3({G.p, {G.st[0], G.st[1], G.st[2], G.st[3]}}, g.n, groups, og, g.oh, g.ow, W.p, true, cg,
                       2 - g.ph, 2 - g.pw, g.h, g.w, nullptr, 0, dx->data<T>());
      return dx;
    }
  }
  const Op4<T> G = op4_planes<T>(gy, lg, ct);
  // Channel blocks: each owns its dx planes (windows overlap across positions, never across channels);
  // enough blocks per image that small batches still spread over the pool.
  const int64_t want = std::max<int64_t>(1, 8 / std::max<int64_t>(1, g.n * groups));
  const int64_t cbs = std::max<int64_t>(1, (cg + want - 1) / want), nblk = (cg + cbs - 1) / cbs;
  const int64_t nb = tile_positions(cbs * khw, L, sizeof(T), 1 << 20);
  T* dxp = dx->data<T>();
  // float32 column tiles come from the packed GEMM: the rows of W_g^T of every channel block packed once,
  // each tile of gy packed as it is used.
  const PackedGemm& pg = packed_gemm();
  const int64_t apb = panels(cbs * khw, pg.mr) * pg.mr * og;
  float* wpk = nullptr;  // as in conv_fwd_packed: the caller's scratch, packed one row panel per item
  if constexpr (std::is_same_v<T, float>) {
    if (!direct && use_packed_gemm()) {
      wpk = tile_scratch<float, 3>((size_t)(groups * nblk * apb));
      const int64_t mp = panels(cbs * khw, pg.mr);
      parallel_for(groups * nblk * mp, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t u = lo; u < hi; ++u) {
          const int64_t gb = u / mp, gi = gb / nblk, c0 = gb % nblk * cbs, i0 = u % mp * pg.mr;
          const int64_t rows = (std::min(cg, c0 + cbs) - c0) * khw;
          if (i0 < rows)
            pack_a(W.p + gi * og * cg * khw + c0 * khw + i0, cg * khw, true, std::min<int64_t>(pg.mr, rows - i0), og,
                   pg.mr, wpk + gb * apb + i0 * og);
        }
      });
    }
  }
  (void)get_num_threads();
  parallel_for(g.n * groups * nblk, 1, [&](int64_t lo, int64_t hi) {
    T* col = direct ? nullptr : tile_scratch<T>((size_t)(cbs * khw * nb));
    float* gpk = !wpk ? nullptr : tile_scratch<float, 1>((size_t)(panels(nb, pg.nr) * pg.nr * og));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t n = u / (groups * nblk), gi = u / nblk % groups, c0 = u % nblk * cbs, c1 = std::min(cg, c0 + cbs);
      const T* gn = G.p + n * G.st[0] + gi * og * G.st[1];
      const T* wg = W.p + gi * og * cg * khw + c0 * khw;  // W_g^T's rows for channels [c0, c1)
      T* dxn = dxp + (n * g.c + gi * cg) * HW;
      const int64_t rows = (c1 - c0) * khw;
      for (int64_t p0 = 0; p0 < L; p0 += nb) {
        const int64_t p1 = std::min(L, p0 + nb);
        if (direct) {
          gemm_rowmajor(true, false, rows, p1 - p0, og, wg, cg * khw, gn + p0, G.st[1], T(0), dxn + c0 * HW + p0, HW);
        } else {
          bool packed = false;
          if constexpr (std::is_same_v<T, float>) {
            if (wpk) {
              pack_b(gn + p0, G.st[1], og, p1 - p0, pg.nr, gpk);
              pg.run(wpk + (u % (groups * nblk)) * apb, gpk, rows, p1 - p0, og, col, p1 - p0, false);
              packed = true;
            }
          }
          if (!packed)
            gemm_rowmajor(true, false, rows, p1 - p0, og, wg, cg * khw, gn + p0, G.st[1], T(0), col, p1 - p0);
          col2im_tile(col, g, c0, c1, p0, p1, dxn);
        }
      }
    }
  });
  return dx;
}

template <typename T>
StoragePtr conv_bwd_weight(const CpuStorage& x, const Layout& lx, const CpuStorage& gy, const Layout& lg,
                           const ConvGeom& g, int64_t groups, DType ct) {
  const int64_t c_out = lg.shape()[1], og = c_out / groups, cg = g.c / groups, K = cg * g.kh * g.kw;
  const int64_t L = g.oh * g.ow, wsize = c_out * K;
  auto dw = new_cpu(ct, wsize, /*zeroed=*/true);
  if (wsize == 0 || g.n * L == 0) return dw;
  const bool direct = pointwise(g);
  const Op4<T> X = direct ? op4_planes<T>(x, lx, ct) : op4<T>(x, lx, ct, false);
  const Op4<T> G = op4_planes<T>(gy, lg, ct);
  // Positions are this GEMM's contraction: long tiles (past L2, but read once) keep its small-M GEMMs fast.
  const int64_t nb = tile_positions(direct ? 0 : K, L, sizeof(T), g.n, 4 * kTileBytes, 4 * kMaxTile, 4);
  const int64_t tiles = (L + nb - 1) / nb;
  // The sum over (image, tile) units is split into a fixed number of chunks (from the shape alone), each
  // with its own partial dw, added in chunk order: the same result on any thread count.
  const int64_t units = g.n * tiles;
  int64_t parts = std::min<int64_t>(units, 8);
  while (parts > 2 && parts * wsize * (int64_t)sizeof(T) > (int64_t(16) << 20)) parts /= 2;
  std::vector<T> partial((size_t)((parts - 1) * wsize));
  T* dwp = dw->data<T>();
  (void)get_num_threads();
  parallel_for(parts, 1, [&](int64_t lo, int64_t hi) {
    T* col = direct ? nullptr : tile_scratch<T>((size_t)(K * nb));
    for (int64_t pi = lo; pi < hi; ++pi) {
      T* acc = pi == 0 ? dwp : partial.data() + (pi - 1) * wsize;
      bool first = true;
      for (int64_t u = units * pi / parts; u < units * (pi + 1) / parts; ++u) {
        const int64_t n = u / tiles, p0 = u % tiles * nb, p1 = std::min(L, p0 + nb);
        for (int64_t gi = 0; gi < groups; ++gi) {
          const T* xn = X.p + n * X.st[0] + gi * cg * X.st[1];
          const T* gt = G.p + n * G.st[0] + gi * og * G.st[1] + p0;
          T* dwg = acc + gi * og * K;
          if (direct) {
            gemm_rowmajor(false, true, og, K, p1 - p0, gt, G.st[1], xn + p0, X.st[1], first ? T(0) : T(1), dwg, K);
          } else {
            im2col_tile(xn, X.st[1], X.st[2], X.st[3], g, 0, cg, p0, p1, p1 - p0, col);
            gemm_rowmajor(false, true, og, K, p1 - p0, gt, G.st[1], col, p1 - p0, first ? T(0) : T(1), dwg, K);
          }
        }
        first = false;
      }
    }
  });
  if (parts > 1)
    parallel_for(wsize, 16384, [&](int64_t lo, int64_t hi) {
      for (int64_t pi = 1; pi < parts; ++pi) {
        const T* src = partial.data() + (pi - 1) * wsize;
        for (int64_t e = lo; e < hi; ++e) dwp[e] += src[e];
      }
    });
  return dw;
}

// f32 and f64 run as they are; f16 / bf16 run in f32 (operands cast once) and round the result once.
DType compute_type(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }
StoragePtr rounded(StoragePtr r, DType dt) {
  if (r->dtype() == dt) return r;
  return r->to_dtype(Layout::contiguous({r->numel()}), dt);
}

StoragePtr im2col(const BackendStorage& x_, const Layout& l, const ConvGeom& g) {
  const CpuStorage& x = as_cpu(x_);
  const DType dt = x.dtype();
  StoragePtr out;
  switch (itemsize(dt)) {  // pure data movement: the element's size is all that matters
    case 1: out = im2col_typed<uint8_t>(x, l, g, dt); break;
    case 2: out = im2col_typed<uint16_t>(x, l, g, dt); break;
    case 4: out = im2col_typed<uint32_t>(x, l, g, dt); break;
    default: out = im2col_typed<uint64_t>(x, l, g, dt); break;
  }
  return out;
}

StoragePtr col2im(const BackendStorage& cols_, const ConvGeom& g) {
  const CpuStorage& cols = as_cpu(cols_);
  const DType dt = cols.dtype();
  switch (dt) {
    case DType::F32: return col2im_typed<float>(cols.data<float>(), g, dt);
    case DType::F64: return col2im_typed<double>(cols.data<double>(), g, dt);
    case DType::F16:
    case DType::BF16: {  // overlapping windows add up: sum in f32, round once
      auto c32 = cols.to_dtype(Layout::contiguous({cols.numel()}), DType::F32);
      auto x32 = col2im_typed<float>(as_cpu(*c32).data<float>(), g, DType::F32);
      return x32->to_dtype(Layout::contiguous({x32->numel()}), dt);
    }
    case DType::I64: return col2im_typed<int64_t>(cols.data<int64_t>(), g, dt);
    case DType::U32: return col2im_typed<uint32_t>(cols.data<uint32_t>(), g, dt);
    case DType::U8: return col2im_typed<uint8_t>(cols.data<uint8_t>(), g, dt);
    case DType::I32: return col2im_typed<int32_t>(cols.data<int32_t>(), g, dt);
    case DType::Bool: EMBER_CHECK(false, DType, "[conv_transpose2d] not supported for bool"); break;
  }
  return nullptr;
}

StoragePtr conv2d_fwd(const BackendStorage& x_, const Layout& l, const BackendStorage& w, const Layout& lw,
                      const BackendStorage* b, const Layout* lb, const ConvGeom& g, int64_t groups) {
  const CpuStorage& x = as_cpu(x_);
  const DType dt = x.dtype();
  const DType ct = compute_type(dt);
  const CpuStorage* bc = b ? &as_cpu(*b) : nullptr;
  auto r = ct == DType::F64 ? conv_fwd<double>(x, l, as_cpu(w), lw, bc, lb, g, groups, ct)
                            : conv_fwd<float>(x, l, as_cpu(w), lw, bc, lb, g, groups, ct);
  return rounded(r, dt);
}

StoragePtr conv2d_bwd_input(const BackendStorage& gy_, const Layout& l, const BackendStorage& w, const Layout& lw,
                            const ConvGeom& g, int64_t groups) {
  const CpuStorage& gy = as_cpu(gy_);
  const DType dt = gy.dtype();
  const DType ct = compute_type(dt);
  auto r = ct == DType::F64 ? conv_bwd_input<double>(gy, l, as_cpu(w), lw, g, groups, ct)
                            : conv_bwd_input<float>(gy, l, as_cpu(w), lw, g, groups, ct);
  return rounded(r, dt);
}

StoragePtr conv2d_bwd_weight(const BackendStorage& x_, const Layout& l, const BackendStorage& gy, const Layout& lg,
                             const ConvGeom& g, int64_t groups) {
  const CpuStorage& x = as_cpu(x_);
  const DType dt = x.dtype();
  const DType ct = compute_type(dt);
  auto r = ct == DType::F64 ? conv_bwd_weight<double>(x, l, as_cpu(gy), lg, g, groups, ct)
                            : conv_bwd_weight<float>(x, l, as_cpu(gy), lg, g, groups, ct);
  return rounded(r, dt);
}

}  // namespace

void register_conv() {
  Kernels<Im2col>::set(DeviceKind::Cpu, &im2col);
  Kernels<Col2im>::set(DeviceKind::Cpu, &col2im);
  Kernels<Conv2dFwd>::set(DeviceKind::Cpu, &conv2d_fwd);
  Kernels<Conv2dBwdInput>::set(DeviceKind::Cpu, &conv2d_bwd_input);
  Kernels<Conv2dBwdWeight>::set(DeviceKind::Cpu, &conv2d_bwd_weight);
}

}  // namespace ember::cpu
