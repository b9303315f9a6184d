// CPU scaled dot-product attention: the seam's sdpa entries (forward, decode, backward) over the per-ISA
// flash-attention kernels of fused_attn.inc, split across the pool by (batch, head) and query tiles.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu/fused.h"
#include "cpu/parallel.h"
#include "../fused.h"  // ember::stats_dtype (this directory has a fused.h of its own)
#include "families/sdpa.h"
#include "registry.h"

namespace ember::cpu {
namespace {
int fi(DType dt) { return (int)dt; }
}  // namespace
namespace {

// SdpaParams from the seam's geometry (cpp/fused.cpp) and the operands' data.
void setup_sdpa(const SdpaArgs& a, const SdpaGeom& g, SdpaParams& p) {
  p.B = g.B, p.H = g.H, p.Hkv = g.Hkv, p.Lq = g.Lq, p.Lk = g.Lk, p.D = g.D, p.Dv = g.Dv;
  std::copy(g.sq, g.sq + 4, p.sq);
  std::copy(g.sk, g.sk + 4, p.sk);
  std::copy(g.sv, g.sv + 4, p.sv);
  const size_t isz = itemsize(a.q->dtype());
  p.q = (const char*)as_cpu(*a.q).raw() + a.lq.offset() * isz;
  p.k = (const char*)as_cpu(*a.k).raw() + a.lk.offset() * isz;
  p.v = (const char*)as_cpu(*a.v).raw() + a.lv.offset() * isz;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.causal = a.causal;
  p.coff = p.Lk - p.Lq;
  if (!a.mask) return;
  std::copy(g.sm, g.sm + 4, p.sm);
  p.mask = (const char*)as_cpu(*a.mask).raw() + a.lmask.offset() * (int64_t)itemsize(a.mask->dtype());
  p.mask_dtype = a.mask->dtype();
}

// The decode path (SdpaDecodeFn) serves up to this many query rows per key/value head; beyond, the
// tiled forward's register-blocked Q·Kᵀ wins.
constexpr int64_t kDecodeRows = 16;
// Keys [0, Lk) in chunks spread over the pool, a function of the shape only (so every bit of the result
// is the same on any pool): about 64 items in all, each with at least 256 keys.
int64_t decode_chunks(int64_t BHkv, int64_t Lk) {
  return std::max<int64_t>(1, std::min<int64_t>((Lk + 255) / 256, (64 + BHkv - 1) / BHkv));
}

// The decode forward: each (b, kv head, key chunk) item leaves (max, sum, unnormalised P·V) per query
// row; they merge here in chunk order into out and lse.
void sdpa_decode(const SdpaParams& p, DType dt) {
  const int64_t group = p.H / p.Hkv, R = group * p.Lq, BHkv = p.B * p.Hkv, ld = sdpa_decode_ld(p.Dv);
  const int64_t nch = decode_chunks(BHkv, p.Lk), chunk = (p.Lk + nch - 1) / nch;
  const bool f64 = dt == DType::F64;
  const int64_t csz = f64 ? 8 : 4;
  std::unique_ptr<char[]> parts(new char[(size_t)(BHkv * nch * R * ld * csz)]);
  auto fn = fused_kernels().sdpa_decode[fi(dt)];
  parallel_for(BHkv * nch, 1, [&](int64_t a, int64_t e) {
    for (int64_t it = a; it < e; ++it) {
      const int64_t bk = it / nch, c = it % nch, k0 = c * chunk, k1 = std::min(p.Lk, k0 + chunk);
      fn(p, bk / p.Hkv, bk % p.Hkv, k0, std::max(k0, k1), parts.get() + (size_t)(it * R * ld * csz));
    }
  });
  const auto merge = [&](auto zero) {
    using C = decltype(zero);
    const C* pp = (const C*)parts.get();
    EMBER_DISPATCH_FLOAT(dt, {
      C* lse = (C*)p.lse;
      parallel_for(BHkv * R, 16, [&](int64_t a, int64_t e) {
        std::vector<double> o((size_t)p.Dv);
        for (int64_t it = a; it < e; ++it) {
          const int64_t bk = it / R, r = it % R, b = bk / p.Hkv, hk = bk % p.Hkv;
          const int64_t h = hk * group + r / p.Lq, i = r % p.Lq, row = (b * p.H + h) * p.Lq + i;
          double mx = -INFINITY;
          for (int64_t c = 0; c < nch; ++c) {
            const double m = (double)pp[((bk * nch + c) * R + r) * ld];
            mx = m != m ? m : std::max(mx, m);  // a NaN chunk (NaN scores) makes the row NaN
            if (mx != mx) break;
          }
          double sum = 0;
          std::fill(o.begin(), o.end(), 0.0);
          if (mx != -INFINITY)
            for (int64_t c = 0; c < nch; ++c) {
              const C* src = pp + ((bk * nch + c) * R + r) * ld;
              if ((double)src[0] == -INFINITY) continue;
              const double w = std::exp2((double)src[0] - mx);
              sum += w * (double)src[1];
              for (int64_t d = 0; d < p.Dv; ++d) o[d] += w * (double)src[2 + d];
            }
          if (mx != mx) sum = mx;  // the NaN row: NaN output and lse
          const double inv = sum > 0 ? 1.0 / sum : (sum == sum ? 0.0 : sum);  // fully masked rows give 0
          int64_t ld;
          T* out = sdpa_out_rows<T>(p.out, p.st_out, b, h, p.H, p.Lq, p.Dv, ld) + i * ld;
          for (int64_t d = 0; d < p.Dv; ++d) out[d] = store<T>((typename Acc<T>::type)(o[d] * inv));
          lse[row] = sum > 0 ? (C)((mx + std::log2(sum)) * 0.69314718055994530942) : (C)(sum == sum ? -INFINITY : sum);
        }
      });
    });
  };
  if (f64) merge(0.0);
  else merge(0.0f);
}

constexpr int64_t kQChunkMin = 64, kQChunkMax = 512;  // query rows per forward work item

// How many items share one head's key tiles in the backward. A function of the shape only (never of
// the thread count), so dQ's summation order, and with it every bit of the result, is the same on any
// pool. 1 when there are enough heads for a large pool; else up to kBwdItems items in all, each with at
// least kMinTilesPerPart tiles (an item also packs the head's Q and dO and computes rowsum(dO * O):
// about a tile's worth of work at D = 64, worth paying only for a few tiles), and the dQ partials (one
// Lq x D buffer per item) kept under kDqPartsBytes.
constexpr int64_t kBwdItems = 32, kMinTilesPerPart = 4, kDqPartsBytes = int64_t(64) << 20;
int64_t sdpa_bwd_parts(int64_t BH, int64_t Lq, int64_t Lk, int64_t D, DType stats) {
  if (BH >= kBwdItems) return 1;
  const int64_t tiles = (Lk + kSdpaKeyTile - 1) / kSdpaKeyTile;
  const int64_t per_part = std::max<int64_t>(1, BH * Lq * sdpa_dq_ld(D) * (int64_t)itemsize(stats));
  const int64_t cap = kDqPartsBytes / per_part;
  return std::max<int64_t>(1, std::min({(kBwdItems + BH - 1) / BH, tiles / kMinTilesPerPart, cap}));
}

// The backward's partial sums, in one layout: out row (o, i)[d] =
// scale * sum over s < nsum (in order) of parts[((o * nsum + s) * inner + i) * ld + d]. dQ: o = bh,
// s = part, i = query row; grouped dK/dV: o = (b, kv head), s = query head of the group, i = key.
// Out's rows are at the strides st of an output of `heads` heads (SdpaParams' st_*).
void sum_row_parts(const void* parts_, int64_t outer, int64_t nsum, int64_t inner, int64_t ld, int64_t n,
                   double scale, DType dt, void* out_, const int64_t* st, int64_t heads) {
  const auto run = [&](auto zero) {
    using C = decltype(zero);
    const C* parts = (const C*)parts_;
    const C sc = (C)scale;
    EMBER_DISPATCH_FLOAT(dt, {
      parallel_for(outer * inner, 64, [&](int64_t r0, int64_t r1) {
        std::vector<C> acc((size_t)n);
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t o = r / inner, i = r % inner;
          std::fill(acc.begin(), acc.end(), (C)0);
          for (int64_t s = 0; s < nsum; ++s) {
            const C* src = parts + ((o * nsum + s) * inner + i) * ld;
            for (int64_t d = 0; d < n; ++d) acc[d] += src[d];
          }
          int64_t lo;
          T* out = sdpa_out_rows<T>(out_, st, o / heads, o % heads, heads, inner, n, lo) + i * lo;
          for (int64_t d = 0; d < n; ++d) out[d] = store<T>((typename Acc<T>::type)(acc[d] * sc));
        }
      });
    });
  };
  if (dt == DType::F64) run(0.0);
  else run(0.0f);
}

// An output of n elements: the caller's destination `to` when given (its strides gst go to st; null is
// returned, as the seam's contract says), else a new dense storage (returned). ptr: where it starts.
CpuStoragePtr dest(DType dt, const BackendStorage* to, const Layout& l, const int64_t* gst, int64_t n, void*& ptr,
                   int64_t* st) {
  if (to) {
    ptr = (char*)as_cpu(*to).raw() + l.offset() * itemsize(dt);
    std::copy(gst, gst + 3, st);
    return nullptr;
  }
  auto s = new_cpu(dt, n);
  ptr = s->raw();
  return s;
}

}  // namespace

std::tuple<Sto, Sto> sdpa_fwd(const SdpaArgs& a, const SdpaGeom& geo) {
  const CpuStorage& q = as_cpu(*a.q);
  SdpaParams p;
  setup_sdpa(a, geo, p);
  const int64_t BH = p.B * p.H;
  auto out = dest(q.dtype(), a.out, a.lout, geo.sout, BH * p.Lq * p.Dv, p.out, p.st_out);
  auto lse = new_cpu(fused::stats_dtype(q.dtype()), BH * p.Lq);
  p.lse = lse->raw();
  if (BH * p.Lq == 0) return {out, lse};
  if ((p.H / p.Hkv) * p.Lq <= kDecodeRows && p.Lk > 0) {
    sdpa_decode(p, q.dtype());
    return {out, lse};
  }
  auto fn = fused_kernels().sdpa_fwd[fi(q.dtype())];
  // Few, large query chunks: each item packs Kᵀ once, so splitting a head only pays when the pool
  // would otherwise idle (or the chunk's Q/O buffers outgrow L2).
  const int64_t nt = get_num_threads();
  int64_t nqc = std::max<int64_t>((2 * nt + BH - 1) / BH, (p.Lq + kQChunkMax - 1) / kQChunkMax);
  nqc = std::max<int64_t>(1, std::min<int64_t>(nqc, (p.Lq + kQChunkMin - 1) / kQChunkMin));
  const int64_t chunk = (p.Lq + nqc - 1) / nqc;
  parallel_for(BH * nqc, 1, [&](int64_t a, int64_t e) {
    for (int64_t it = a; it < e; ++it) {
      const int64_t bh = it / nqc, c2 = it % nqc;
      // Interleave cheap (early, causal) and costly chunks so each thread's contiguous range is balanced.
      const int64_t c = (c2 % 2 == 0) ? c2 / 2 : nqc - 1 - c2 / 2;
      const int64_t i0 = c * chunk;
      if (i0 < p.Lq) fn(p, bh, i0, std::min(p.Lq, i0 + chunk));
    }
  });
  return {out, lse};
}

std::tuple<Sto, Sto, Sto> sdpa_bwd(const SdpaArgs& a, const SdpaGeom& geo, const BackendStorage& os,
                                   const Layout& lo, const BackendStorage& lses, const BackendStorage& gs,
                                   const Layout& lg) {
  const CpuStorage &q = as_cpu(*a.q), &o = as_cpu(os), &lse = as_cpu(lses), &g = as_cpu(gs);
  SdpaParams p;
  setup_sdpa(a, geo, p);
  std::copy(geo.so, geo.so + 4, p.so);
  std::copy(geo.sg, geo.sg + 4, p.sg);
  const int64_t BH = p.B * p.H;
  const size_t isz = itemsize(q.dtype());
  p.o = (const char*)o.raw() + lo.offset() * isz;
  p.g = (const char*)g.raw() + lg.offset() * isz;
  p.lse_in = lse.raw();
  auto dq = dest(q.dtype(), a.dq, a.ldq, geo.sdq, BH * p.Lq * p.D, p.dq, p.st_dq);
  auto dk = dest(q.dtype(), a.dk, a.ldk, geo.sdk, p.B * p.Hkv * p.Lk * p.D, p.dk, p.st_dk);
  auto dv = dest(q.dtype(), a.dv, a.ldv, geo.sdv, p.B * p.Hkv * p.Lk * p.Dv, p.dv, p.st_dv);
  if (BH == 0) return {dq, dk, dv};
  if (p.Lq == 0 || p.Lk == 0) {  // nothing attends: all gradients are zero
    const auto zero = [&](void* base, const int64_t* st, int64_t H, int64_t L, int64_t n) {
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          int64_t ld;
          const int64_t off = sdpa_out_offset(st, b, h, H, L, n, ld);
          for (int64_t i = 0; i < L; ++i) std::memset((char*)base + (off + i * ld) * isz, 0, (size_t)n * isz);
        }
    };
    zero(p.dq, p.st_dq, p.H, p.Lq, p.D);
    zero(p.dk, p.st_dk, p.Hkv, p.Lk, p.D);
    zero(p.dv, p.st_dv, p.Hkv, p.Lk, p.Dv);
    return {dq, dk, dv};
  }
  auto fn = fused_kernels().sdpa_bwd[fi(q.dtype())];
  // Grouped heads: each query head's dK/dV go to its own partial first (summed per group at the end),
  // so no two items ever add into the same rows.
  const int64_t csz = itemsize(fused::stats_dtype(q.dtype())), ldk = sdpa_dq_ld(p.D), ldv = sdpa_dq_ld(p.Dv);
  std::unique_ptr<char[]> dk_part, dv_part;
  if (p.H != p.Hkv) {
    dk_part.reset(new char[(size_t)(BH * p.Lk * ldk * csz)]);
    dv_part.reset(new char[(size_t)(BH * p.Lk * ldv * csz)]);
    p.dk_part = dk_part.get();
    p.dv_part = dv_part.get();
  }
  const auto finish = [&] {
    if (p.H == p.Hkv) return;
    const int64_t group = p.H / p.Hkv;
    sum_row_parts(p.dk_part, p.B * p.Hkv, group, p.Lk, ldk, p.D, 1.0, q.dtype(), p.dk, p.st_dk, p.Hkv);
    sum_row_parts(p.dv_part, p.B * p.Hkv, group, p.Lk, ldv, p.Dv, 1.0, q.dtype(), p.dv, p.st_dv, p.Hkv);
  };
  const int64_t nparts = sdpa_bwd_parts(BH, p.Lq, p.Lk, p.D, fused::stats_dtype(q.dtype()));
  if (nparts == 1) {
    parallel_for(BH, 1, [&](int64_t a, int64_t e) {
      for (int64_t bh = a; bh < e; ++bh) fn(p, bh, 0, 1, nullptr);
    });
    finish();
    return {dq, dk, dv};
  }
  // Few heads: each head's key tiles are dealt to nparts items. Their dK/dV rows are disjoint; dQ gets
  // one partial per item, summed (and scaled) below in part order.
  // Not value-initialised: each item zeroes its own partial (rows of ldk, like dK's).
  std::unique_ptr<char[]> parts(new char[(size_t)(BH * nparts * p.Lq * ldk * csz)]);
  parallel_for(BH * nparts, 1, [&](int64_t a, int64_t e) {
    for (int64_t it = a; it < e; ++it)
      fn(p, it / nparts, it % nparts, nparts, parts.get() + (size_t)(it * p.Lq * ldk * csz));
  });
  sum_row_parts(parts.get(), BH, nparts, p.Lq, ldk, p.D, p.scale, q.dtype(), p.dq, p.st_dq, p.H);
  finish();
  return {dq, dk, dv};
}

void register_sdpa() {
  Kernels<SdpaFwd>::set(DeviceKind::Cpu, &sdpa_fwd);
  Kernels<SdpaBwd>::set(DeviceKind::Cpu, &sdpa_bwd);
}

}  // namespace ember::cpu
