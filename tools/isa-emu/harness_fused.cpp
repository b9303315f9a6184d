// ISA cross-check, fused row kernels: softmax/log_softmax, rms_norm, layer_norm (fwd+bwd), activation backward.
#include "harness.h"

namespace isa_check {

// ---- fused: softmax -----------------------------------------------------------------------------
struct RowCase { int64_t rows, n, ld; bool nt; };
static std::vector<RowCase> row_cases(bool allow_nt) {
  std::vector<RowCase> v;
  for (int64_t n : lengths()) {
    v.push_back({1, n, n, false});
    if (n <= 1000) v.push_back({5, n, n + 3, false});  // grouped rows, padded row stride
  }
  if (!g_quick) { v.push_back({2, 8200, 8200, false}); v.push_back({3, 100, 100, false}); }
  if (allow_nt) { v.push_back({3, 64, 64, true}); v.push_back({2, 1024, 1024, true}); v.push_back({2, 4096, 4096, true}); }
  return v;
}
static std::string case_name(const std::string& g, const RowCase& c, const char* extra = "") {
  char b[200];
  snprintf(b, sizeof b, "%s rows=%lld n=%lld ld=%lld nt=%d%s", g.c_str(), (long long)c.rows, (long long)c.n,
           (long long)c.ld, (int)c.nt, extra);
  return b;
}

void test_softmax() {
  for (int log = 0; log < 2; ++log)
    for (DType dt : kFloat) {
      Group g, gb;
      g.name = std::string(log ? "log_softmax" : "softmax") + ".fwd." + dtn(dt);
      gb.name = std::string(log ? "log_softmax" : "softmax") + ".bwd." + dtn(dt);
      auto fa = VA->f.softmax_fwd[(int)dt], fb = VB->f.softmax_fwd[(int)dt];
      auto ba = VA->f.softmax_bwd[(int)dt], bb = VB->f.softmax_bwd[(int)dt];
      for (const RowCase& c : row_cases(true))
        for (int pat = 0; pat < 3; ++pat) {
          if (pat == 2 && c.n > 1000) continue;
          Buf x(dt, c.rows * c.ld, c.nt ? 0 : 1);
          fill_uniform(x, -6, 6);
          if (pat == 1) for (int64_t i = 0; i < x.n; ++i) x.set(i, x.get(i) + 5000.0 * (dt == DType::F16 ? 0.01 : 1));  // offset
          if (pat == 2) {  // masked entries (-inf), a fully masked row (all -inf -> NaN), a NaN row
            for (int64_t i = 0; i < x.n; i += 4) x.set(i, -INFINITY);
            if (c.rows > 1) for (int64_t j = 0; j < c.n; ++j) x.set(c.ld + j, -INFINITY);
            if (c.rows > 2) x.set(2 * c.ld + c.n / 2, NAN);
          }
          Buf xb = copy_of(x);
          if (g_break == "softmax") perturb_last(xb, (c.rows - 1) * c.ld + c.n);
          Buf ya(dt, c.rows * c.n), yb(dt, c.rows * c.n);
          fa(x.data(), c.ld, ya.data(), c.rows, c.n, log, c.nt);
          fb(xb.data(), c.ld, yb.data(), c.rows, c.n, log, c.nt);
          ++g.cases;
          const std::string what = case_name(g.name, c, pat == 1 ? " offset" : pat == 2 ? " masked" : "");
          check_pair(g, what, ya, yb, c.rows * c.n, 1, 2, fused_tol(dt));
          // double reference
          std::vector<double> ref(c.rows * c.n);
          for (int64_t r = 0; r < c.rows; ++r) {
            double m = -INFINITY, s = 0;
            bool nan = false;
            for (int64_t j = 0; j < c.n; ++j) { double v = x.get(r * c.ld + j); nan |= v != v; m = std::max(m, v); }
            for (int64_t j = 0; j < c.n; ++j) s += std::exp(x.get(r * c.ld + j) - m);
            for (int64_t j = 0; j < c.n; ++j) {
              double v = x.get(r * c.ld + j) - m;
              ref[r * c.n + j] = nan || m == -INFINITY ? NAN : log ? v - std::log(s) : std::exp(v) / s;
            }
          }
          const double rtol = dt == DType::F32 ? 64 : dt == DType::F64 ? 64 : 2;
          if (pat != 2) {  // NaN conventions of masked rows: compared between variants only
            check_ref(g, what, ya, "A", ref, c.rows * c.n, 1, rtol);
            check_ref(g, what, yb, "B", ref, c.rows * c.n, 1, rtol);
          }
          if (pat == 2) continue;
          // backward on A's forward output, the same for both variants
          Buf gr(dt, c.rows * c.ld, 0);
          fill_uniform(gr, -1, 1);
          Buf y_in(dt, c.rows * c.ld, 1);
          for (int64_t r = 0; r < c.rows; ++r)
            for (int64_t j = 0; j < c.n; ++j) y_in.set(r * c.ld + j, ya.get(r * c.n + j));
          Buf grb = copy_of(gr);
          if (g_break == "softmax_bwd") perturb_last(grb, (c.rows - 1) * c.ld + c.n);
          Buf da(dt, c.rows * c.n), db(dt, c.rows * c.n);
          ba(y_in.data(), c.ld, gr.data(), c.ld, da.data(), c.rows, c.n, log, c.nt);
          bb(y_in.data(), c.ld, grb.data(), c.ld, db.data(), c.rows, c.n, log, c.nt);
          ++gb.cases;
          check_pair(gb, case_name(gb.name, c), da, db, c.rows * c.n, 1, 2, fused_tol(dt));
          for (int64_t r = 0; r < c.rows; ++r) {
            double s = 0;
            for (int64_t j = 0; j < c.n; ++j) {
              const double gv = gr.get(r * c.ld + j), yv = y_in.get(r * c.ld + j);
              s += log ? gv : gv * yv;
            }
            for (int64_t j = 0; j < c.n; ++j) {
              const double gv = gr.get(r * c.ld + j), yv = y_in.get(r * c.ld + j);
              ref[r * c.n + j] = log ? gv - std::exp(yv) * s : yv * (gv - s);
            }
          }
          // the backward's normwise scale is tiny next to its terms: judge against max|g|-sized terms
          check_ref(gb, case_name(gb.name, c), da, "A", ref, c.rows * c.n, 1, rtol * 4);
          check_ref(gb, case_name(gb.name, c), db, "B", ref, c.rows * c.n, 1, rtol * 4);
        }
      g.done();
      gb.done();
    }
}

// ---- fused: rms_norm / layer_norm -----------------------------------------------------------------
void test_norms() {
  for (DType dt : kFloat) {
    const DType sd = stats_dt(dt);
    Group gr, grb, gl, glb;
    gr.name = std::string("rms_norm.fwd.") + dtn(dt);
    grb.name = std::string("rms_norm.bwd.") + dtn(dt);
    gl.name = std::string("layer_norm.fwd.") + dtn(dt);
    glb.name = std::string("layer_norm.bwd.") + dtn(dt);
    for (const RowCase& c : row_cases(true))
      for (int pat = 0; pat < 2; ++pat) {
        Buf x(dt, c.rows * c.ld, c.nt ? 0 : 1), w(dt, c.n), b(dt, c.n), g(dt, c.rows * c.ld, 2);
        fill_uniform(x, -2, 3);
        if (pat == 1) for (int64_t i = 0; i < x.n; ++i) x.set(i, 100.0 + 0.01 * x.get(i));  // large offset, small std
        fill_uniform(w, 0.5, 1.5);
        fill_uniform(b, -0.5, 0.5);
        fill_uniform(g, -1, 1);
        const double eps = 1e-5;
        const std::string sfx = pat ? " offset" : "";
        // rms fwd
        Buf xb = copy_of(x);
        if (g_break == "rms") perturb_last(xb, (c.rows - 1) * c.ld + c.n);
        Buf ya(dt, c.rows * c.n), yb(dt, c.rows * c.n), ra(sd, c.rows), rb(sd, c.rows);
        VA->f.rms_fwd[(int)dt](x.data(), c.ld, w.data(), ya.data(), ra.data(), c.rows, c.n, eps, c.nt);
        VB->f.rms_fwd[(int)dt](xb.data(), c.ld, w.data(), yb.data(), rb.data(), c.rows, c.n, eps, c.nt);
        ++gr.cases;
        std::string what = case_name(gr.name, c, sfx.c_str());
        check_pair(gr, what + " y", ya, yb, c.rows * c.n, 1, 2, fused_tol(dt));
        check_pair(gr, what + " rstd", ra, rb, c.rows, 1, 2, fused_tol(sd));
        std::vector<double> ref(c.rows * c.n), rref(c.rows), mref(c.rows);
        for (int64_t r = 0; r < c.rows; ++r) {
          double s = 0;
          for (int64_t j = 0; j < c.n; ++j) s += x.get(r * c.ld + j) * x.get(r * c.ld + j);
          rref[r] = 1 / std::sqrt(s / c.n + eps);
          for (int64_t j = 0; j < c.n; ++j) ref[r * c.n + j] = x.get(r * c.ld + j) * rref[r] * w.get(j);
        }
        const double rt = dt == DType::F32 || dt == DType::F64 ? 64 : 2;
        check_ref(gr, what + " y", ya, "A", ref, c.rows * c.n, 1, rt);
        check_ref(gr, what + " y", yb, "B", ref, c.rows * c.n, 1, rt);
        check_ref(gr, what + " rstd", ra, "A", rref, c.rows, 1, 64, true);
        check_ref(gr, what + " rstd", rb, "B", rref, c.rows, 1, 64, true);
        // rms bwd (A's rstd for both)
        Buf gb2 = copy_of(g);
        if (g_break == "rms_bwd") perturb_last(gb2, (c.rows - 1) * c.ld + c.n);
        Buf dxa(dt, c.rows * c.n), dxb(dt, c.rows * c.n), dwa(sd, c.n), dwb(sd, c.n);
        fill_uniform(dwa, -1, 1);  // accumulators start non-zero (+=)
        dwb = copy_of(dwa);
        Buf dw0 = copy_of(dwa);
        VA->f.rms_bwd[(int)dt](x.data(), c.ld, w.data(), ra.data(), g.data(), c.ld, dxa.data(), dwa.data(), c.rows, c.n, c.nt);
        VB->f.rms_bwd[(int)dt](x.data(), c.ld, w.data(), ra.data(), gb2.data(), c.ld, dxb.data(), dwb.data(), c.rows, c.n, c.nt);
        ++grb.cases;
        what = case_name(grb.name, c, sfx.c_str());
        // dx = r*g*w - (cancelling term): judged against the size of r*g*w (n = 1 cancels to ~0)
        double tscale = 0;
        for (int64_t r = 0; r < c.rows; ++r) tscale = std::max(tscale, ra.get(r) * 1.5);  // |g| <= 1, |w| <= 1.5
        check_pair(grb, what + " dx", dxa, dxb, c.rows * c.n, 1, 2, fused_tol(dt), tscale);
        check_pair(grb, what + " dw", dwa, dwb, c.n, 1, 2, fused_tol(sd));
        {
          std::vector<double> rdx(c.rows * c.n), rdw(c.n);
          for (int64_t j = 0; j < c.n; ++j) rdw[j] = dw0.get(j);
          for (int64_t r = 0; r < c.rows; ++r) {
            const double rs = ra.get(r);
            double s = 0;
            for (int64_t j = 0; j < c.n; ++j) s += g.get(r * c.ld + j) * w.get(j) * x.get(r * c.ld + j);
            for (int64_t j = 0; j < c.n; ++j) {
              const double xv = x.get(r * c.ld + j), gv = g.get(r * c.ld + j);
              rdx[r * c.n + j] = rs * gv * w.get(j) - xv * rs * rs * rs * s / c.n;
              rdw[j] += gv * xv * rs;
            }
          }
          check_ref(grb, what + " dx", dxa, "A", rdx, c.rows * c.n, 1, rt * 4, false, tscale);
          check_ref(grb, what + " dx", dxb, "B", rdx, c.rows * c.n, 1, rt * 4, false, tscale);
          check_ref(grb, what + " dw", dwa, "A", rdw, c.n, 1, 64);
          check_ref(grb, what + " dw", dwb, "B", rdw, c.n, 1, 64);
        }
        // layer norm fwd, with and without w/b (null = ones/zeros is done by the host, so pass real ones)
        xb = copy_of(x);
        if (g_break == "ln") perturb_last(xb, (c.rows - 1) * c.ld + c.n);
        Buf la(dt, c.rows * c.n), lb(dt, c.rows * c.n), ma(sd, c.rows), mb(sd, c.rows), sa(sd, c.rows), sb(sd, c.rows);
        VA->f.ln_fwd[(int)dt](x.data(), c.ld, w.data(), b.data(), la.data(), ma.data(), sa.data(), c.rows, c.n, eps, c.nt);
        VB->f.ln_fwd[(int)dt](xb.data(), c.ld, w.data(), b.data(), lb.data(), mb.data(), sb.data(), c.rows, c.n, eps, c.nt);
        ++gl.cases;
        what = case_name(gl.name, c, sfx.c_str());
        // offset 100, std 0.014: condition number offset/std ~ 7000 (the mean's own rounding, and for f32
        // the one-block mean is a float sum): 16384 eps for f32/f64
        check_pair(gl, what + " y", la, lb, c.rows * c.n, 1, 2, pat && (dt == DType::F32 || dt == DType::F64) ? 16384 : fused_tol(dt));
        check_pair(gl, what + " mean", ma, mb, c.rows, 1, 2, fused_tol(sd));
        check_pair(gl, what + " rstd", sa, sb, c.rows, 1, 2, fused_tol(sd) * (pat ? 1e4 : 1));
        for (int64_t r = 0; r < c.rows; ++r) {
          double mu = 0, var = 0;
          for (int64_t j = 0; j < c.n; ++j) mu += x.get(r * c.ld + j);
          mu /= c.n;
          for (int64_t j = 0; j < c.n; ++j) var += (x.get(r * c.ld + j) - mu) * (x.get(r * c.ld + j) - mu);
          var /= c.n;
          mref[r] = mu;
          rref[r] = 1 / std::sqrt(var + eps);
          for (int64_t j = 0; j < c.n; ++j) ref[r * c.n + j] = (x.get(r * c.ld + j) - mu) * rref[r] * w.get(j) + b.get(j);
        }
        // with an offset of 100 and std 0.01 the float mean carries ~1e-5 relative of the std: looser
        const double lt = pat && dt == DType::F32 ? 16384 : pat && dt == DType::F64 ? 131072 : rt;
        check_ref(gl, what + " y", la, "A", ref, c.rows * c.n, 1, lt);
        check_ref(gl, what + " y", lb, "B", ref, c.rows * c.n, 1, lt);
        check_ref(gl, what + " mean", ma, "A", mref, c.rows, 1, 64, true);
        check_ref(gl, what + " mean", mb, "B", mref, c.rows, 1, 64, true);
        check_ref(gl, what + " rstd", sa, "A", rref, c.rows, 1, pat ? 1e5 : 64, true);
        check_ref(gl, what + " rstd", sb, "B", rref, c.rows, 1, pat ? 1e5 : 64, true);
        // layer norm bwd on A's stats
        gb2 = copy_of(g);
        if (g_break == "ln_bwd") perturb_last(gb2, (c.rows - 1) * c.ld + c.n);
        Buf ldxa(dt, c.rows * c.n), ldxb(dt, c.rows * c.n), ldwa(sd, c.n), ldba(sd, c.n);
        fill_uniform(ldwa, -1, 1);
        fill_uniform(ldba, -1, 1);
        Buf ldwb = copy_of(ldwa), ldbb = copy_of(ldba), ldw0 = copy_of(ldwa), ldb0 = copy_of(ldba);
        VA->f.ln_bwd[(int)dt](x.data(), c.ld, w.data(), ma.data(), sa.data(), g.data(), c.ld, ldxa.data(), ldwa.data(), ldba.data(), c.rows, c.n, c.nt);
        VB->f.ln_bwd[(int)dt](x.data(), c.ld, w.data(), ma.data(), sa.data(), gb2.data(), c.ld, ldxb.data(), ldwb.data(), ldbb.data(), c.rows, c.n, c.nt);
        ++glb.cases;
        what = case_name(glb.name, c, sfx.c_str());
        double lscale = 0;
        for (int64_t r = 0; r < c.rows; ++r) lscale = std::max(lscale, sa.get(r) * 1.5);
        check_pair(glb, what + " dx", ldxa, ldxb, c.rows * c.n, 1, 2, fused_tol(dt) * (pat ? 64 : 1), lscale);
        check_pair(glb, what + " dw", ldwa, ldwb, c.n, 1, 2, fused_tol(sd) * (pat ? 64 : 1));
        check_pair(glb, what + " db", ldba, ldbb, c.n, 1, 2, fused_tol(sd));
        {
          std::vector<double> rdx(c.rows * c.n), rdw(c.n), rdb(c.n);
          for (int64_t j = 0; j < c.n; ++j) rdw[j] = ldw0.get(j), rdb[j] = ldb0.get(j);
          for (int64_t r = 0; r < c.rows; ++r) {
            const double mu = ma.get(r), rs = sa.get(r);
            double s1 = 0, s2 = 0;
            for (int64_t j = 0; j < c.n; ++j) {
              const double gw = g.get(r * c.ld + j) * w.get(j), xh = (x.get(r * c.ld + j) - mu) * rs;
              s1 += gw, s2 += gw * xh;
            }
            s1 /= c.n, s2 /= c.n;
            for (int64_t j = 0; j < c.n; ++j) {
              const double gv = g.get(r * c.ld + j), xh = (x.get(r * c.ld + j) - mu) * rs;
              rdx[r * c.n + j] = rs * (gv * w.get(j) - s1 - xh * s2);
              rdw[j] += gv * xh;
              rdb[j] += gv;
            }
          }
          const double bt = pat && dt == DType::F32 ? 1e5 : rt * 4;
          check_ref(glb, what + " dx", ldxa, "A", rdx, c.rows * c.n, 1, bt, false, lscale);
          check_ref(glb, what + " dx", ldxb, "B", rdx, c.rows * c.n, 1, bt, false, lscale);
          check_ref(glb, what + " dw", ldwa, "A", rdw, c.n, 1, pat ? bt : 64);
          check_ref(glb, what + " dw", ldwb, "B", rdw, c.n, 1, pat ? bt : 64);
          check_ref(glb, what + " db", ldba, "A", rdb, c.n, 1, 64);
          check_ref(glb, what + " db", ldbb, "B", rdb, c.n, 1, 64);
        }
      }
    gr.done();
    grb.done();
    gl.done();
    glb.done();
  }
}

// ---- fused: activation backward ------------------------------------------------------------------
void test_act() {
  const char* names[] = {"sigmoid_bwd", "silu_bwd", "gelu_bwd"};
  for (int k = 0; k < 3; ++k)
    for (DType dt : kFloat) {
      Group g;
      g.name = std::string(names[k]) + "." + dtn(dt);
      EltBwdFn fa = k == 0 ? VA->f.sigmoid_bwd[(int)dt] : k == 1 ? VA->f.silu_bwd[(int)dt] : VA->f.gelu_bwd[(int)dt];
      EltBwdFn fb = k == 0 ? VB->f.sigmoid_bwd[(int)dt] : k == 1 ? VB->f.silu_bwd[(int)dt] : VB->f.gelu_bwd[(int)dt];
      for (int64_t n : lengths())
        for (int pat = 0; pat < 2; ++pat) {
          Buf a(dt, n, 1), gr(dt, n, 3);
          if (k == 0) fill_uniform(a, 0, 1); else fill_uniform(a, -12, 12);
          fill_uniform(gr, -2, 2);
          if (pat == 1) add_specials(a);
          Buf ab = copy_of(a);
          if (g_break == "act") perturb_last(ab, n);
          Buf da(dt, n), db(dt, n);
          fa(a.data(), gr.data(), da.data(), n);
          fb(ab.data(), gr.data(), db.data(), n);
          ++g.cases;
          char what[160];
          snprintf(what, sizeof what, "%s n=%lld %s", g.name.c_str(), (long long)n, pat ? "specials" : "random");
          // elementwise; silu uses vexp (vector width independent math): bit-identical expected with FMA on both
          check_pair(g, what, da, db, n, 1, g_fma_both ? 0 : 4, g_fma_both ? 0 : 8);
          if (pat == 0) {
            std::vector<double> ref(n);
            for (int64_t i = 0; i < n; ++i) {
              const double x = a.get(i), gv = gr.get(i);
              if (k == 0) ref[i] = gv * x * (1 - x);
              else if (k == 1) { const double s = 1 / (1 + std::exp(-x)); ref[i] = gv * s * (1 + x * (1 - s)); }
              else ref[i] = gv * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) * 0.3989422804014327);
            }
            const double tol = dt == DType::F32 || dt == DType::F64 ? 16 : 4;
            check_ref(g, what, da, "A", ref, n, 1, tol, true, 1.0);
            check_ref(g, what, db, "B", ref, n, 1, tol, true, 1.0);
          }
        }
      g.done();
    }
}

}  // namespace isa_check
