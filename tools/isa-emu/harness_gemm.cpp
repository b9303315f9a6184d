// The packed conv GEMM's register tiles (cpu/packed_gemm.h) of both variants against a double reference:
// ragged row panels and column panels, several k blocks, C overwritten or added to.
#include "cpu/packed_gemm.h"
#include "harness.h"

namespace isa_check {

// The panel layouts of cpu/packed_gemm.h, zero-padded (written here so a packing bug in ember cannot
// hide a kernel bug).
static Buf pack_rows(const std::vector<float>& a, int64_t m, int64_t k, int mr) {
  Buf p(DType::F32, panels(m, mr) * mr * k);
  float* d = (float*)p.data();
  for (int64_t i = 0; i < panels(m, mr) * mr; ++i)
    for (int64_t kk = 0; kk < k; ++kk) d[(i / mr * k + kk) * mr + i % mr] = i < m ? a[i * k + kk] : 0.0f;
  return p;
}
static Buf pack_cols(const std::vector<float>& b, int64_t k, int64_t n, int nr) {
  Buf p(DType::F32, panels(n, nr) * nr * k);
  float* d = (float*)p.data();
  for (int64_t j = 0; j < panels(n, nr) * nr; ++j)
    for (int64_t kk = 0; kk < k; ++kk) d[(j / nr * k + kk) * nr + j % nr] = j < n ? b[kk * n + j] : 0.0f;
  return p;
}

void test_gemm() {
  Group g;
  g.name = "packed_gemm.f32";
  const int64_t shapes[][3] = {{1, 1, 1},    {5, 7, 3},     {6, 16, 40},   {8, 32, 256}, {13, 40, 300},
                               {24, 95, 513}, {64, 33, 129}, {130, 17, 64}, {7, 200, 9}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    for (bool acc : {false, true}) {
      std::vector<float> a(m * k), b(k * n), c0(m * n);
      for (auto& v : a) v = (float)urand(-1, 1);
      for (auto& v : b) v = (float)urand(-1, 1);
      for (auto& v : c0) v = (float)urand(-1, 1);
      std::vector<double> ref(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double t = acc ? c0[i * n + j] : 0.0;
          for (int64_t kk = 0; kk < k; ++kk) t += (double)a[i * k + kk] * b[kk * n + j];
          ref[i * n + j] = t;
        }
      const std::string what = "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k) +
                               (acc ? " +=" : " =");
      Buf out[2];
      for (int vi = 0; vi < 2; ++vi) {
        Variant* v = vi ? VB : VA;
        std::vector<float> bb = b;
        if (vi == 1 && g_break == "gemm") bb[k * n - 1] += 0.5f;
        const Buf ap = pack_rows(a, m, k, v->g.mr), bp = pack_cols(bb, k, n, v->g.nr);
        Buf& c = out[vi];
        c = Buf(DType::F32, m * n);
        memcpy(c.data(), c0.data(), m * n * sizeof(float));
        v->g.run((const float*)ap.data(), (const float*)bp.data(), m, n, k, (float*)c.data(), n, acc);
        if (!c.guard_ok()) report(g, what, vi ? "B wrote past C" : "A wrote past C");
        check_ref(g, what, c, vi ? "B" : "A", ref, m * n, 1, 64);
      }
      // the two tiles sum each k block in the same order: only FMA against mul + add (base) differs
      check_pair(g, what, out[0], out[1], m * n, 1, 0, 64);
      g.cases += 1;
    }
  }
  g.done();
}

}  // namespace isa_check
