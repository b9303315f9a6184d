// ISA cross-check, fused attention: sdpa forward and backward (dQ partials, grouped-query dK/dV).
#include "harness.h"

namespace isa_check {

// ---- fused: sdpa -------------------------------------------------------------------------------------
struct SdpaCase { int64_t B, H, Hkv, Lq, Lk, D, Dv; bool causal; int mask; bool strided; };
static std::vector<SdpaCase> sdpa_cases() {
  std::vector<SdpaCase> v = {
      {1, 1, 1, 1, 1, 8, 8, false, 0, false},      {1, 2, 2, 7, 13, 17, 17, false, 0, false},
      {1, 2, 1, 9, 70, 16, 24, true, 0, false},    {1, 1, 1, 70, 70, 32, 32, true, 0, true},
      {1, 2, 2, 13, 130, 64, 64, false, 1, false}, {2, 2, 1, 6, 64, 33, 8, false, 2, false},
      {1, 1, 1, 5, 200, 48, 48, false, 3, true},   {1, 1, 1, 67, 129, 40, 40, true, 1, false},
  };
  if (g_quick) v.resize(5);
  return v;
}
// Strides (elements) of a (B, H, L, D) tensor stored densely, or with L and D swapped (strided).
static void dense_strides(int64_t H, int64_t L, int64_t D, bool strided, int64_t s[4]) {
  if (!strided) { s[3] = 1; s[2] = D; s[1] = L * D; s[0] = H * L * D; }
  else { s[2] = 1; s[3] = L; s[1] = L * D; s[0] = H * L * D; }  // transposed last two dims
}
void test_sdpa() {
  for (DType dt : kFloat) {
    const DType sd = stats_dt(dt);
    Group gf, gbw;
    gf.name = std::string("sdpa.fwd.") + dtn(dt);
    gbw.name = std::string("sdpa.bwd.") + dtn(dt);
    for (const SdpaCase& c : sdpa_cases()) {
      SdpaParams p;
      p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Lq = c.Lq, p.Lk = c.Lk, p.D = c.D, p.Dv = c.Dv;
      Buf q(dt, c.B * c.H * c.Lq * c.D, 1), k(dt, c.B * c.Hkv * c.Lk * c.D), v(dt, c.B * c.Hkv * c.Lk * c.Dv, 3);
      fill_uniform(q, -1.5, 1.5);
      fill_uniform(k, -1.5, 1.5);
      fill_uniform(v, -1, 1);
      dense_strides(c.H, c.Lq, c.D, c.strided, p.sq);
      dense_strides(c.Hkv, c.Lk, c.D, c.strided, p.sk);
      dense_strides(c.Hkv, c.Lk, c.Dv, false, p.sv);
      p.scale = 1.0 / std::sqrt((double)c.D);
      p.causal = c.causal;
      // masks: 1 = f32 additive (B,1,Lq,Lk broadcast over heads), 2 = u8 (1,1,1,Lk), 3 = bf16 additive full
      Buf mf(DType::F32, c.B * c.Lq * c.Lk), mu(DType::U8, c.Lk), mh(DType::BF16, c.B * c.H * c.Lq * c.Lk);
      if (c.mask == 1) {
        fill_uniform(mf, -3, 1);
        for (int64_t i = 0; i < mf.n; i += 7) mf.set(i, -INFINITY);
        p.mask = mf.data(); p.mask_dtype = DType::F32;
        p.sm[0] = c.Lq * c.Lk; p.sm[1] = 0; p.sm[2] = c.Lk; p.sm[3] = 1;
      } else if (c.mask == 2) {
        for (int64_t i = 0; i < c.Lk; ++i) mu.set(i, i % 3 != 1);
        p.mask = mu.data(); p.mask_dtype = DType::U8;
        p.sm[0] = 0; p.sm[1] = 0; p.sm[2] = 0; p.sm[3] = 1;
      } else if (c.mask == 3) {
        fill_uniform(mh, -2, 2);
        p.mask = mh.data(); p.mask_dtype = DType::BF16;
        p.sm[0] = c.H * c.Lq * c.Lk; p.sm[1] = c.Lq * c.Lk; p.sm[2] = c.Lk; p.sm[3] = 1;
      }
      auto mask_val = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> double {
        if (c.causal && j > i) return -INFINITY;
        if (!p.mask) return 0;
        if (c.mask == 2) return mu.get(j) ? 0 : -INFINITY;
        if (c.mask == 1) return mf.get(b * c.Lq * c.Lk + i * c.Lk + j);
        return mh.get(((b * c.H + h) * c.Lq + i) * c.Lk + j);
      };
      const int64_t BH = c.B * c.H;
      Buf qb = copy_of(q);
      if (g_break == "sdpa") perturb_last(qb, q.n);
      Buf oa(dt, BH * c.Lq * c.Dv), ob(dt, BH * c.Lq * c.Dv), la(sd, BH * c.Lq), lb(sd, BH * c.Lq);
      // forward: A in one work item per head; B split into query chunks of 64 (as the host may)
      p.q = q.data(), p.k = k.data(), p.v = v.data();
      p.out = oa.data(), p.lse = la.data();
      for (int64_t bh = 0; bh < BH; ++bh) VA->f.sdpa_fwd[(int)dt](p, bh, 0, c.Lq);
      SdpaParams pb = p;
      pb.q = qb.data(), pb.out = ob.data(), pb.lse = lb.data();
      for (int64_t bh = 0; bh < BH; ++bh)
        for (int64_t i0 = 0; i0 < c.Lq; i0 += 64) VB->f.sdpa_fwd[(int)dt](pb, bh, i0, std::min(c.Lq, i0 + 64));
      ++gf.cases;
      char what[200];
      snprintf(what, sizeof what, "%s B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld Dv=%lld causal=%d mask=%d strided=%d",
               gf.name.c_str(), (long long)c.B, (long long)c.H, (long long)c.Hkv, (long long)c.Lq, (long long)c.Lk,
               (long long)c.D, (long long)c.Dv, (int)c.causal, c.mask, (int)c.strided);
      check_pair(gf, std::string(what) + " out", oa, ob, oa.n, 1, 2, fused_tol(dt));
      check_pair(gf, std::string(what) + " lse", la, lb, la.n, 1, 2, fused_tol(sd));
      // double reference (forward and backward)
      const int64_t grp = c.H / c.Hkv;
      auto qv = [&](int64_t b, int64_t h, int64_t i, int64_t d) { return q.get(b * p.sq[0] + h * p.sq[1] + i * p.sq[2] + d * p.sq[3]); };
      auto kv = [&](int64_t b, int64_t h, int64_t j, int64_t d) { return k.get(b * p.sk[0] + h * p.sk[1] + j * p.sk[2] + d * p.sk[3]); };
      auto vv = [&](int64_t b, int64_t h, int64_t j, int64_t d) { return v.get(b * p.sv[0] + h * p.sv[1] + j * p.sv[2] + d * p.sv[3]); };
      std::vector<double> ro(oa.n), rl(la.n), P((size_t)c.Lq * c.Lk);
      // backward inputs: g random, o = A's forward output, lse = A's
      Buf gr(dt, BH * c.Lq * c.Dv, 2);
      fill_uniform(gr, -1, 1);
      std::vector<double> rdq(BH * c.Lq * c.D, 0.0), rdk(c.B * c.Hkv * c.Lk * c.D, 0.0), rdv(c.B * c.Hkv * c.Lk * c.Dv, 0.0);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h) {
          const int64_t hk = h / grp, bh = b * c.H + h;
          for (int64_t i = 0; i < c.Lq; ++i) {
            double m = -INFINITY;
            std::vector<double> s(c.Lk);
            for (int64_t j = 0; j < c.Lk; ++j) {
              double acc = 0;
              for (int64_t d = 0; d < c.D; ++d) acc += qv(b, h, i, d) * kv(b, hk, j, d);
              s[j] = acc * p.scale + mask_val(b, h, i, j);
              m = std::max(m, s[j]);
            }
            double l = 0;
            for (int64_t j = 0; j < c.Lk; ++j) l += m == -INFINITY ? 0 : std::exp(s[j] - m);
            for (int64_t j = 0; j < c.Lk; ++j) P[i * c.Lk + j] = l > 0 ? std::exp(s[j] - m) / l : 0;
            rl[bh * c.Lq + i] = l > 0 ? m + std::log(l) : -INFINITY;
            for (int64_t d = 0; d < c.Dv; ++d) {
              double acc = 0;
              for (int64_t j = 0; j < c.Lk; ++j) acc += P[i * c.Lk + j] * vv(b, hk, j, d);
              ro[(bh * c.Lq + i) * c.Dv + d] = acc;
            }
          }
          // backward with A's o (as the kernels get it)
          for (int64_t i = 0; i < c.Lq; ++i) {
            double Di = 0;
            for (int64_t d = 0; d < c.Dv; ++d) Di += gr.get((bh * c.Lq + i) * c.Dv + d) * oa.get((bh * c.Lq + i) * c.Dv + d);
            for (int64_t j = 0; j < c.Lk; ++j) {
              const double pij = P[i * c.Lk + j];
              if (pij == 0) continue;
              double dp = 0;
              for (int64_t d = 0; d < c.Dv; ++d) {
                const double gv = gr.get((bh * c.Lq + i) * c.Dv + d);
                dp += gv * vv(b, hk, j, d);
                rdv[((b * c.Hkv + hk) * c.Lk + j) * c.Dv + d] += pij * gv;
              }
              const double ds = pij * (dp - Di) * p.scale;
              for (int64_t d = 0; d < c.D; ++d) {
                rdq[(bh * c.Lq + i) * c.D + d] += ds * kv(b, hk, j, d);
                rdk[((b * c.Hkv + hk) * c.Lk + j) * c.D + d] += ds * qv(b, h, i, d);
              }
            }
          }
        }
      const double rt = dt == DType::F32 ? 256 : dt == DType::F64 ? 1e4 : 3;  // f64 exp2 goes through vexp: ~1e-12
      check_ref(gf, std::string(what) + " out", oa, "A", ro, oa.n, 1, rt);
      check_ref(gf, std::string(what) + " out", ob, "B", ro, ob.n, 1, rt);
      check_ref(gf, std::string(what) + " lse", la, "A", rl, la.n, 1, 256);
      check_ref(gf, std::string(what) + " lse", lb, "B", rl, lb.n, 1, 256);

      // ---- backward: nparts = 1 (direct dQ) and nparts = 2 (dQ partials summed here, as the host does)
      for (int64_t nparts : {1, 2}) {
        if (nparts == 2 && c.Lk <= 64) continue;
        const int64_t ldk = sdpa_dq_ld(c.D), ldv = sdpa_dq_ld(c.Dv);
        Buf dqA(dt, BH * c.Lq * c.D), dkA(dt, c.B * c.Hkv * c.Lk * c.D), dvA(dt, c.B * c.Hkv * c.Lk * c.Dv);
        Buf dqB = dqA, dkB = dkA, dvB = dvA;
        Buf grb = copy_of(gr);
        if (g_break == "sdpa_bwd") perturb_last(grb, gr.n);
        for (int side = 0; side < 2; ++side) {
          Variant* V = side ? VB : VA;
          SdpaParams bp = p;
          bp.o = oa.data();
          bp.so[3] = 1, bp.so[2] = c.Dv, bp.so[1] = c.Lq * c.Dv, bp.so[0] = c.H * c.Lq * c.Dv;
          bp.g = side ? grb.data() : gr.data();
          memcpy(bp.sg, bp.so, sizeof bp.so);
          bp.lse_in = la.data();
          Buf& dq = side ? dqB : dqA;
          Buf& dk = side ? dkB : dkA;
          Buf& dv = side ? dvB : dvA;
          bp.dq = dq.data(), bp.dk = dk.data(), bp.dv = dv.data();
          const size_t cs = isz(sd);
          std::vector<uint8_t> dkp, dvp, parts;
          if (c.H != c.Hkv) {
            dkp.assign(BH * c.Lk * ldk * cs, 0);
            dvp.assign(BH * c.Lk * ldv * cs, 0);
            bp.dk_part = dkp.data(), bp.dv_part = dvp.data();
          }
          if (nparts == 1) {
            for (int64_t bh = 0; bh < BH; ++bh) V->f.sdpa_bwd[(int)dt](bp, bh, 0, 1, nullptr);
          } else {
            parts.assign(BH * nparts * c.Lq * ldk * cs, 0xEE);
            for (int64_t it = 0; it < BH * nparts; ++it)
              V->f.sdpa_bwd[(int)dt](bp, it / nparts, it % nparts, nparts, parts.data() + it * c.Lq * ldk * cs);
          }
          // the host's sum_row_parts, in double for simplicity then stored (partials are f32/f64)
          auto sum_parts = [&](const uint8_t* src, int64_t outer, int64_t nsum, int64_t inner, int64_t ld, int64_t n,
                               double scale, Buf& out) {
            for (int64_t r = 0; r < outer * inner; ++r) {
              const int64_t o = r / inner, i = r % inner;
              for (int64_t d = 0; d < n; ++d) {
                double acc = 0;  // C-typed accumulate like the host
                float accf = 0;
                for (int64_t s = 0; s < nsum; ++s) {
                  const int64_t idx = ((o * nsum + s) * inner + i) * ld + d;
                  if (sd == DType::F64) acc += ((const double*)src)[idx];
                  else accf += ((const float*)src)[idx];
                }
                out.set(r * n + d, sd == DType::F64 ? acc * scale : (double)(accf * (float)scale));
              }
            }
          };
          if (nparts > 1) sum_parts(parts.data(), BH, nparts, c.Lq, ldk, c.D, p.scale, dq);
          if (c.H != c.Hkv) {
            sum_parts(dkp.data(), c.B * c.Hkv, grp, c.Lk, ldk, c.D, 1.0, dk);
            sum_parts(dvp.data(), c.B * c.Hkv, grp, c.Lk, ldv, c.Dv, 1.0, dv);
          }
        }
        ++gbw.cases;
        char w2[260];
        snprintf(w2, sizeof w2, "%s nparts=%lld", what, (long long)nparts);
        std::string ws = std::string(w2).replace(0, gf.name.size(), gbw.name);
        const double bt = fused_tol(dt) * (dt == DType::F32 ? 4 : 1);
        check_pair(gbw, ws + " dq", dqA, dqB, dqA.n, 1, 2, bt, 0.01);
        check_pair(gbw, ws + " dk", dkA, dkB, dkA.n, 1, 2, bt, 0.01);
        check_pair(gbw, ws + " dv", dvA, dvB, dvA.n, 1, 2, bt);
        const double brt = dt == DType::F32 ? 1024 : dt == DType::F64 ? 1e5 : 4;
        check_ref(gbw, ws + " dq", dqA, "A", rdq, dqA.n, 1, brt, false, 0.01);
        check_ref(gbw, ws + " dq", dqB, "B", rdq, dqB.n, 1, brt, false, 0.01);
        check_ref(gbw, ws + " dk", dkA, "A", rdk, dkA.n, 1, brt, false, 0.01);
        check_ref(gbw, ws + " dk", dkB, "B", rdk, dkB.n, 1, brt, false, 0.01);
        check_ref(gbw, ws + " dv", dvA, "A", rdv, dvA.n, 1, brt);
        check_ref(gbw, ws + " dv", dvB, "B", rdv, dvB.n, 1, brt);
      }
    }
    gf.done();
    gbw.done();
  }
}

// ------------------------------------------------------------------------------------------------
}  // namespace isa_check
