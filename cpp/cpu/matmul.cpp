// Batched matmul on CPU through BLAS (OpenBLAS from scipy-openblas32, Accelerate on macOS): f32/f64
// natively, f16/bf16 through f32, integers with a plain loop. Any strides; operands BLAS cannot read
// directly are copied once.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/gemm.h"
#include "cpu/nditer.h"
#include "cpu/packed_gemm.h"
#include "cpu/parallel.h"

#if defined(EMBER_ACCELERATE)
#include <Accelerate/Accelerate.h>
#define EMBER_SGEMM cblas_sgemm
#define EMBER_DGEMM cblas_dgemm
#elif defined(EMBER_OPENBLAS)
#include <cblas.h>
#define EMBER_SGEMM scipy_cblas_sgemm
#define EMBER_DGEMM scipy_cblas_dgemm
#endif

namespace ember::cpu {

namespace {

// fork() while another thread is inside OpenBLAS can leave one of its internal locks held for good in
// the child, whose first GEMM then hangs. A fork waits for the calls under way and holds new ones back.
std::atomic<int> g_in_blas{0};
std::atomic<int> g_forking{0};  // forks between their prepare and parent handlers

struct BlasCall {
  BlasCall() {
    for (;;) {
      while (g_forking.load()) std::this_thread::yield();
      g_in_blas.fetch_add(1);  // seq_cst on both sides: a fork sees this call or the call sees the fork
      if (!g_forking.load()) return;
      g_in_blas.fetch_sub(1);
    }
  }
  ~BlasCall() { g_in_blas.fetch_sub(1); }
  BlasCall(const BlasCall&) = delete;
  BlasCall& operator=(const BlasCall&) = delete;
};

void blas_fork_prepare() {
  g_forking.fetch_add(1);
  while (g_in_blas.load()) std::this_thread::yield();
}
void blas_fork_parent() { g_forking.fetch_sub(1); }
void blas_fork_child() {  // the child has only the forking thread, which was outside BLAS
  g_in_blas.store(0);
  g_forking.store(0);
}
const int g_blas_atfork_registered = pthread_atfork(blas_fork_prepare, blas_fork_parent, blas_fork_child);

}  // namespace

// BLAS always runs single-threaded: matmul splits its work into fixed tiles on ember's own pool, so
// there is one source of threads and the result does not depend on the thread count.
void blas_set_num_threads(int n) {
  (void)g_blas_atfork_registered;
#if defined(EMBER_OPENBLAS)
  (void)n;
  // No BlasCall: this runs under the pool's lock, which a fork's prepare handler takes.
  scipy_openblas_set_num_threads(1);
#else
  (void)n;
#endif
}

namespace {

struct Mat {  // one operand: batch layout (offsets) + the 2-D strides of each matrix
  Layout batch;
  int64_t rows, cols, rs, cs;
};

Mat split(const Layout& l) {
  int64_t nd = l.ndim();
  Shape bs(l.shape().begin(), l.shape().end() - 2), bst(l.stride().begin(), l.stride().end() - 2);
  Mat m{Layout(bs, bst, l.offset()), l.shape()[nd - 2], l.shape()[nd - 1], l.stride()[nd - 2], l.stride()[nd - 1]};
  // size-1 dims may carry any stride; normalise so the BLAS-readability test below is not fooled
  if (m.rows == 1) m.rs = m.cols;
  if (m.cols == 1) m.cs = 1;
  return m;
}

// 'N' when row-major readable with ld, 'T' when column-major readable, 0 otherwise.
char blas_mode(const Mat& m, int64_t& ld) {
  if (m.cs == 1 && m.rs >= std::max<int64_t>(1, m.cols)) { ld = m.rs; return 'N'; }
  if (m.rs == 1 && m.cs >= std::max<int64_t>(1, m.rows)) { ld = m.cs; return 'T'; }
  return 0;
}

std::vector<int64_t> batch_offsets(const Layout& b) {
  std::vector<int64_t> offs;
  offs.reserve(b.numel());
  if (b.ndim() == 0) { offs.push_back(b.offset()); return offs; }
  for_each_block(b, [&](int64_t off, int64_t len, int64_t st) {
    for (int64_t k = 0; k < len; ++k) offs.push_back(off + k * st);
  });
  return offs;
}

// C (m x n, row stride ldc) = op(A) op(B); ta/tb: 'N' row-major readable, 'T' column-major readable.
template <typename T>
void gemm(const T* a, char ta, int64_t lda, const T* b, char tb, int64_t ldb, T* c, int64_t ldc, int64_t m,
          int64_t n, int64_t k) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
      return;
    }
    EMBER_CHECK(m < INT_MAX && n < INT_MAX && k < INT_MAX && lda < INT_MAX && ldb < INT_MAX && ldc < INT_MAX, Shape,
                "[matmul] matrix dims exceed the 32-bit BLAS interface");
    auto TA = ta == 'N' ? CblasNoTrans : CblasTrans;
    auto TB = tb == 'N' ? CblasNoTrans : CblasTrans;
    BlasCall guard;
    if constexpr (std::is_same_v<T, float>)
      EMBER_SGEMM(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
    else
      EMBER_DGEMM(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, 0.0, c, (int)ldc);
  }
}

// Tiles depend only on the shape (never on the thread count), so every thread count makes the same BLAS
// calls and gets bit-identical results. Small products stay one call; big ones split into ~256x256 tiles.
constexpr int64_t kTileWork = int64_t(1) << 21;  // m*n*k below which one call is cheapest
constexpr int64_t kTile = 256;

template <typename T>
void matmul_blas(const CpuStorage& A, const Layout& la, const CpuStorage& B, const Layout& lb, CpuStorage& out) {
  // Creating the pool sets BLAS to one thread. A one-tile product runs inline and never reaches the
  // pool, so without this a process whose first parallel work is such a matmul ran BLAS on its own
  // threads (all cores, whatever EMBER_NUM_THREADS says).
  (void)get_num_threads();
  Mat ma = split(la), mb = split(lb);
  int64_t lda = 0, ldb = 0;
  char ta = blas_mode(ma, lda), tb = blas_mode(mb, ldb);
  // A leading dim past BLAS's 32-bit ints (a view into a huge buffer) is read through a compact copy.
  if (lda > INT32_MAX) ta = 0;
  if (ldb > INT32_MAX) tb = 0;
  CpuStoragePtr ca, cb;  // contiguous copies when BLAS cannot read an operand as is
  const CpuStorage* pa = &A;
  const CpuStorage* pb = &B;
  if (!ta) {
    ca = new_cpu(A.dtype(), la.numel());
    Layout cl = Layout::contiguous(la.shape());
    A.copy_into(la, *ca, cl);
    ma = split(cl);
    ta = blas_mode(ma, lda);
    pa = ca.get();
  }
  if (!tb) {
    cb = new_cpu(B.dtype(), lb.numel());
    Layout cl = Layout::contiguous(lb.shape());
    B.copy_into(lb, *cb, cl);
    mb = split(cl);
    tb = blas_mode(mb, ldb);
    pb = cb.get();
  }
  int64_t m = ma.rows;
  const int64_t k = ma.cols, n = mb.cols;
  // BLAS takes 32-bit ints: a dim or leading dim past 2**31-1 would be truncated (wrong results,
  // reads out of bounds). storage.cpp refuses such dims before anything is allocated; this stays as
  // the backend's own guard.
  EMBER_CHECK(std::max({m, n, k, lda, ldb}) <= INT32_MAX, Unsupported, "[matmul] a dim or row stride of ",
              shape_str(la.shape()), " @ ", shape_str(lb.shape()), " exceeds BLAS's 32-bit limit");
  T* c = out.data<T>();
  // Fold the batch into M when B is shared by every batch and A's batches stack as rows.
  Shape bsh = ma.batch.shape(), bst = ma.batch.stride();
  coalesce(bsh, bst);
  bool b_shared = std::all_of(mb.batch.stride().begin(), mb.batch.stride().end(), [](int64_t s) { return s == 0; });
  std::vector<int64_t> oa, ob;
  if (b_shared && ta == 'N' && bsh.size() == 1 && bst[0] == m * lda && m * bsh[0] <= INT32_MAX) {
    oa = {ma.batch.offset()};
    ob = {mb.batch.offset()};
    m *= bsh[0];
  } else {
    oa = batch_offsets(ma.batch);
    ob = batch_offsets(mb.batch);
  }
  const bool tile = m * n * k >= kTileWork;
  const int64_t tm = tile ? (m + kTile - 1) / kTile : 1, tn = tile ? (n + kTile - 1) / kTile : 1;
  const int64_t rows = tile ? kTile : m, cols = tile ? kTile : n;
  const int64_t per_batch = tm * tn;
  const T* a0 = pa->data<T>();
  const T* b0 = pb->data<T>();
  parallel_for((int64_t)oa.size() * per_batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t bi = u / per_batch, r0 = (u % per_batch) / tn * rows, c0 = (u % tn) * cols;
      const T* a = a0 + oa[bi] + r0 * (ta == 'N' ? lda : 1);
      const T* b = b0 + ob[bi] + c0 * (tb == 'N' ? 1 : ldb);
      gemm<T>(a, ta, lda, b, tb, ldb, c + bi * m * n + r0 * n + c0, n, std::min(rows, m - r0), std::min(cols, n - c0), k);
    }
  });
}

template <typename T>
void matmul_loop(const CpuStorage& A, const Layout& la, const CpuStorage& B, const Layout& lb, CpuStorage& out) {
  Mat ma = split(la), mb = split(lb);
  auto oa = batch_offsets(ma.batch), ob = batch_offsets(mb.batch);
  const int64_t m = ma.rows, k = ma.cols, n = mb.cols;
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* c = out.data<T>();
  parallel_for((int64_t)oa.size() * m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   int64_t bi = r / m, i = r % m;
                   for (int64_t j = 0; j < n; ++j) {
                     using U = std::make_unsigned_t<T>;  // wraps like numpy: signed overflow is undefined
                     U acc = 0;
                     for (int64_t p = 0; p < k; ++p)
                       acc += (U)((U)a[oa[bi] + i * ma.rs + p * ma.cs] * (U)b[ob[bi] + p * mb.rs + j * mb.cs]);
                     c[r * n + j] = (T)acc;
                   }
                 }
               });
}


// --- ember's packed GEMM (cpu/packed_gemm.h) as the float matmul ---

// EMBER_MATMUL_GEMM=amx|packed|blas, read per call so tests can run each; anything else (which ember's import
// warns about) keeps the default: on x86 the packed GEMM with AMX tiles for bfloat16 where the CPU has them
// (amx), BLAS (Accelerate on macOS) elsewhere. packed: the vector kernels only; amx without AMX: packed.
enum class MatmulPath { Blas, Packed, Amx };
MatmulPath matmul_path() {
  const char* e = std::getenv("EMBER_MATMUL_GEMM");
  if (e && !std::strcmp(e, "blas")) return MatmulPath::Blas;
  if (e && !std::strcmp(e, "packed")) return MatmulPath::Packed;
  if (e && !std::strcmp(e, "amx")) return MatmulPath::Amx;
#if defined(EMBER_X86)
  return MatmulPath::Amx;
#else
  return MatmulPath::Blas;
#endif
}

template <typename S> constexpr int src_code() { return std::is_same_v<S, f16> ? 1 : std::is_same_v<S, bf16> ? 2 : 0; }

// C (contiguous, batch x m x n, float) = A @ B for f32 / f16 / bf16 operands of any strides: every
// operand is packed straight from where it lies (converted to float on the way), then the C blocks run
// on the pool. K is never split and every C element is one FMA chain over k in order, so the result is
// the same bits for any thread count and any block split.
template <typename S>
void matmul_packed(const CpuStorage& A, const Layout& la, const CpuStorage& B, const Layout& lb, float* c,
                   const AmxGemm* amx = nullptr, uint16_t* out16 = nullptr) {
  const PackedGemm& pg = packed_gemm();
  const int mr = pg.mmr, nr = pg.nr;
  Mat ma = split(la), mb = split(lb);
  const int64_t m = ma.rows, k = ma.cols, n = mb.cols;
  if (m == 0 || n == 0) return;
  std::vector<int64_t> oa = batch_offsets(ma.batch), ob = batch_offsets(mb.batch);
  const int64_t nb = (int64_t)oa.size();
  if (nb == 0) return;
  if (k == 0) {
    std::fill(c, c + nb * m * n, 0.0f);
    if (out16) std::fill(out16, out16 + nb * m * n, uint16_t(0));
    return;
  }
  const bool a_shared = std::all_of(oa.begin(), oa.end(), [&](int64_t o) { return o == oa[0]; });
  const bool b_shared = std::all_of(ob.begin(), ob.end(), [&](int64_t o) { return o == ob[0]; });
  // B shared by every batch: the batches stack into one (nb * m) x n product, A's rows found per batch.
  const bool fold = b_shared && nb > 1;
  const int64_t M = fold ? nb * m : m, G = fold ? 1 : nb;
  const int64_t mp = panels(M, mr), np = panels(n, nr);
  const int64_t na = (a_shared && !fold) ? 1 : G, nbb = b_shared ? 1 : G;
  const S* a0 = A.data<S>();
  const S* b0 = B.data<S>();
  const int64_t nt = get_num_threads();
  // A half result: each C block rounded into out16 by the thread that made it, while still in its cache.
  auto round_block = [&](int64_t off, int64_t rows, int64_t cols) {
    if (out16)
      for (int64_t r = 0; r < rows; ++r) pg.round_out(c + off + r * n, cols, out16 + off + r * n, src_code<S>());
  };
  {
    // Few rows: B read where it lies (row-major or transposed; halves converted in registers), only A's rows
    // gathered (as float); split along N.
    const bool b_rows = mb.cs == 1, b_cols = mb.rs == 1 && mb.cs >= k;
    if (M <= 16 && (b_rows || b_cols)) {
      const bool a_direct = std::is_same_v<S, float> && !fold && ma.cs == 1;
      std::vector<float> acopy(a_direct ? 0 : G * M * k);
      if (!a_direct)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t row = 0; row < M; ++row) {
            const int64_t bi = fold ? row / m : g, ri = fold ? row % m : row;
            const S* src = a0 + oa[bi] + ri * ma.rs;
            for (int64_t kk = 0; kk < k; ++kk) acopy[(g * M + row) * k + kk] = load<S>(src[kk * ma.cs]);
          }
      const int64_t lda = a_direct ? ma.rs : k;
      const int64_t unit = b_rows ? nr : 4;  // columns per step of the kernel
      int64_t cw = std::max<int64_t>(unit, (n + 4 * nt - 1) / (4 * nt));
      cw = std::max<int64_t>(cw, 65536 / std::max<int64_t>(1, k * M));  // enough work per item
      cw = (cw + unit - 1) / unit * unit;
      const int64_t nc = (n + cw - 1) / cw;
      parallel_for(G * nc, 1, [&](int64_t lo, int64_t hi) {
        static thread_local std::vector<float> scratch;
        if (b_rows && scratch.size() < (size_t)((pg.mr + nr) * k)) scratch.resize((size_t)((pg.mr + nr) * k));
        for (int64_t u = lo; u < hi; ++u) {
          const int64_t g = u / nc, j0 = u % nc * cw, j1 = std::min(n, j0 + cw);
          const float* ag = a_direct ? reinterpret_cast<const float*>(a0) + oa[g] : acopy.data() + g * M * k;
          const S* bg = b0 + ob[b_shared ? 0 : g];
          float* cg = c + g * M * n;
          if (b_rows) pg.thin(ag, lda, bg, src_code<S>(), mb.rs, M, n, j0, j1, k, cg, n, scratch.data());
          else pg.thin_t(ag, lda, bg, src_code<S>(), mb.cs, M, j0, j1, k, cg, n);
          round_block(g * M * n + j0, M, j1 - j0);
        }
      });
      return;
    }
  }
  if constexpr (std::is_same_v<S, bf16>) {
    // AMX tiles (16 rows) for all but the thinnest products, whose B packing would cost more than it saves
    if (amx && M > 16) {
      const int64_t pa = panels(M, 16), pb = panels(n, 16), psz = amx_panel(k);
      CpuStoragePtr tb = new_cpu(DType::BF16, (na * pa + nbb * pb) * psz);
      uint16_t* tap = reinterpret_cast<uint16_t*>(tb->data<bf16>());
      uint16_t* tbp = tap + na * pa * psz;
      const uint16_t* ua = reinterpret_cast<const uint16_t*>(a0);
      const uint16_t* ub = reinterpret_cast<const uint16_t*>(b0);
      parallel_for(na * pa + nbb * pb, std::max<int64_t>(1, 16384 / (16 * k)), [&](int64_t lo, int64_t hi) {
        const uint16_t* lines[16];
        for (int64_t u = lo; u < hi; ++u) {
          if (u < na * pa) {
            const int64_t g = u / pa, i0 = u % pa * 16;
            const int nl = (int)std::min<int64_t>(16, M - i0);
            for (int r = 0; r < nl; ++r) {
              const int64_t row = i0 + r, bi = fold ? row / m : g, ri = fold ? row % m : row;
              lines[r] = ua + oa[bi] + ri * ma.rs;
            }
            amx->pack_a(lines, nl, ma.cs, k, tap + u * psz);
          } else {
            const int64_t v = u - na * pa, g = v / pb, j0 = v % pb * 16;
            const int nl = (int)std::min<int64_t>(16, n - j0);
            for (int r = 0; r < nl; ++r) lines[r] = ub + ob[g] + (j0 + r) * mb.cs;
            amx->pack_b(lines, nl, mb.rs, k, tbp + v * psz);
          }
        }
      });
      // Blocks of whole 32 x 32 tile groups, split as the float path splits, of at most ~2^29 flops each.
      const int64_t gm = panels(M, 32), gn = panels(n, 32);
      const int64_t want = M * n * k * G < (int64_t(1) << 20) ? 1 : std::max<int64_t>(1, 4 * nt / G);
      int64_t sm = M >= n ? std::min(gm, want) : 1, sn = M >= n ? 1 : std::min(gn, want);
      if (M >= n) sn = std::min(gn, (want + sm - 1) / sm);
      else sm = std::min(gm, (want + sn - 1) / sn);
      while (sm < gm && ((gm + sm - 1) / sm) * 32 * ((gn + sn - 1) / sn) * 32 * k > (int64_t(1) << 28))
        sm = std::min(gm, sm * 2);
      const int64_t rbg = (gm + sm - 1) / sm, cbg = (gn + sn - 1) / sn;
      sm = (gm + rbg - 1) / rbg;
      sn = (gn + cbg - 1) / cbg;
      parallel_for(G * sm * sn, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t u = lo; u < hi; ++u) {
          const int64_t g = u / (sm * sn), bi = u % (sm * sn) / sn, bj = u % sn;
          const int64_t i0 = bi * rbg * 32, j0 = bj * cbg * 32;
          const int64_t rows = std::min(rbg * 32, M - i0), cols = std::min(cbg * 32, n - j0);
          amx->run(tap + ((na == 1 ? 0 : g) * pa + i0 / 16) * psz, tbp + ((nbb == 1 ? 0 : g) * pb + j0 / 16) * psz,
                   rows, cols, k, c + g * M * n + i0 * n + j0, n);
          round_block(g * M * n + i0 * n + j0, rows, cols);
        }
      });
      return;
    }
  }
  // A float with unit column stride is read in place by the tile (run_rows), unpacked, when its rows (all
  // batches' when folded) lie evenly rs apart. Not when rows 4 KiB apart (one L1 set) are reused by many
  // columns: there the packed panels' one stream was faster.
  bool a_rows = std::is_same_v<S, float> && ma.cs == 1 && pg.run_rows && (n <= 512 || ma.rs % 1024 != 0);
  if (a_rows && fold)
    for (int64_t bi = 0; bi < nb && a_rows; ++bi) a_rows = oa[bi] == oa[0] + bi * m * ma.rs;
  // Blocks of C: a few per thread, split along M when tall and along N when wide.
  const int64_t flops = M * n * k * G;
  const int64_t want = flops < (int64_t(1) << 18) ? 1 : std::max<int64_t>(1, 4 * nt / G);
  int64_t sm, sn;
  if (M >= n) {
    sm = std::min(mp, want);
    sn = std::min(np, (want + sm - 1) / sm);
  } else {
    sn = std::min(np, want);
    sm = std::min(mp, (want + sn - 1) / sn);
  }
  sn = std::max(sn, std::min(np, (n + 511) / 512));  // a block's B (k x <= 512 columns) stays in L2 per k block
  // and no block over about a millisecond: Ctrl-C is seen between blocks
  // (counting the block's real rows: a ragged last panel's padding is no work)
  while (sm < mp && 2 * std::min(M, (mp + sm - 1) / sm * mr) * std::min(n, (np + sn - 1) / sn * nr) * k >
                        (int64_t(1) << 27))
    sm = std::min(mp, sm * 2);
  const int64_t rbp = (mp + sm - 1) / sm, cbp = (np + sn - 1) / sn;  // panels in the largest block
  // An operand's part that only one block reads (A's rows when the blocks split N alone, B's columns when
  // they split M alone) is packed by that block into its thread's scratch just before it runs: the panels
  // are then read back from L2 instead of written out to memory by an up-front pass and fetched again.
  constexpr int64_t kJobPack = int64_t(3) << 17;  // floats (1.5 MiB) at most per operand part
  const bool a_job = !a_rows && sn == 1 && na == G && rbp * mr * k <= kJobPack;
  const bool b_job = sm == 1 && nbb == G && cbp * nr * k <= kJobPack;
  const int64_t asz = a_rows || a_job ? 0 : mp * mr * k, bsz = b_job ? 0 : np * nr * k;
  const int64_t job_a = a_job ? rbp * mr * k : 0, job_b = b_job ? cbp * nr * k : 0;  // per-block scratch
  CpuStoragePtr buf = new_cpu(DType::F32, na * asz + nbb * bsz);
  float* ap = buf->data<float>();
  float* bp = ap + na * asz;
  // Packing: one panel at a time; float operands whose panel lines are consecutive elements (A^T's rows, a
  // row-major B's columns) a group of panels at a time, each k step read as one run of >= 128 floats: one
  // panel's own 14 or 32 floats per step, ks apart (often 4 KiB), left half lines and no hardware prefetch.
  const bool a_grp = std::is_same_v<S, float> && !a_rows && !fold && ma.rs == 1;
  const bool b_grp = std::is_same_v<S, float> && mb.cs == 1;
  const int64_t pga = a_grp ? std::max(1, 128 / mr) : 1, pgb = b_grp ? std::max(1, 128 / nr) : 1;
  const int64_t ia = a_rows || a_job ? 0 : (mp + pga - 1) / pga, ib = b_job ? 0 : (np + pgb - 1) / pgb;
  // A's row panels [p0, p1) of batch g into d, B's column panels [q0, q1) likewise
  // (one pass along k for the whole range, however wide)
  auto pack_a_panels = [&](int64_t g, int64_t p0, int64_t p1, float* d) {
    if (a_grp) {
      pg.pack_runs(reinterpret_cast<const float*>(a0 + oa[g] + p0 * mr), ma.cs, M - p0 * mr, mr, p1 - p0, k, d);
      return;
    }
    const void* lines[64];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i0 = p * mr;
      const int nl = (int)std::min<int64_t>(mr, M - i0);
      for (int r = 0; r < nl; ++r) {
        const int64_t row = i0 + r, bi = fold ? row / m : g, ri = fold ? row % m : row;
        lines[r] = a0 + oa[bi] + ri * ma.rs;
      }
      pg.pack(lines, src_code<S>(), nl, ma.cs, k, mr, d + (p - p0) * mr * k);
    }
  };
  auto pack_b_panels = [&](int64_t g, int64_t q0, int64_t q1, float* d) {
    if (b_grp) {
      pg.pack_runs(reinterpret_cast<const float*>(b0 + ob[g] + q0 * nr), mb.rs, n - q0 * nr, nr, q1 - q0, k, d);
      return;
    }
    const void* lines[64];
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t j0 = q * nr;
      const int nl = (int)std::min<int64_t>(nr, n - j0);
      for (int r = 0; r < nl; ++r) lines[r] = b0 + ob[g] + (j0 + r) * mb.cs;
      pg.pack(lines, src_code<S>(), nl, mb.rs, k, nr, d + (q - q0) * nr * k);
    }
  };
  const int64_t pitems = na * ia + nbb * ib;
  parallel_for(pitems, std::max<int64_t>(1, 16384 / (k * std::max(mr, nr))), [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      if (u < na * ia) {
        const int64_t g = u / ia, p0 = u % ia * pga;
        pack_a_panels(g, p0, std::min(mp, p0 + pga), ap + g * asz + p0 * mr * k);
      } else {
        const int64_t v = u - na * ia, g = v / ib, q0 = v % ib * pgb;
        pack_b_panels(g, q0, std::min(np, q0 + pgb), bp + g * bsz + q0 * nr * k);
      }
    }
  });
  parallel_for(G * sm * sn, 1, [&](int64_t lo, int64_t hi) {
    static thread_local std::vector<float> job;  // a_job / b_job panels, kept for the thread's next block
    if (job.size() < (size_t)(job_a + job_b)) job.resize((size_t)(job_a + job_b));
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t g = u / (sm * sn), bi = u % (sm * sn) / sn, bj = u % sn;
      // the panels spread evenly (each block rbp or rbp - 1 of them, likewise cbp): a ragged last block of a
      // few panels left one thread idle at the end
      const int64_t p0 = bi * mp / sm, p1 = (bi + 1) * mp / sm, q0 = bj * np / sn, q1 = (bj + 1) * np / sn;
      const int64_t i0 = p0 * mr, j0 = q0 * nr;
      const int64_t rows = std::min(p1 * mr, M) - i0, cols = std::min(q1 * nr, n) - j0;
      const float* ag = ap + (na == 1 ? 0 : g) * asz + i0 * k;
      const float* bg = bp + (nbb == 1 ? 0 : g) * bsz + j0 * k;
      // A^T's rows (a_grp) packed by the first column panel's tiles instead, unless B is packed so
      const bool a_fused = a_job && a_grp && !(b_job && b_grp);
      if (a_job && !a_fused) {
        pack_a_panels(g, p0, p1, job.data());
        ag = job.data();
      }
      if (b_job && !b_grp) {
        float* d = job.data() + job_a;
        pack_b_panels(g, q0, q1, d);
        bg = d;
      }
      float* cg = c + g * M * n + i0 * n + j0;
      if (b_job && b_grp) {  // B's columns for this block packed by its first row panel's tiles
        pg.run_pack_b(a_rows ? reinterpret_cast<const float*>(a0) + oa[fold ? 0 : g] + i0 * ma.rs : ag,
                      ma.rs, a_rows, reinterpret_cast<const float*>(b0 + ob[g]) + j0, mb.rs, job.data() + job_a,
                      rows, cols, k, cg, n, false);
      } else if (a_fused) {
        pg.run_pack_a(reinterpret_cast<const float*>(a0 + oa[g]) + p0 * mr, ma.cs, job.data(), bg, rows, cols, k, cg, n,
                      false);
      } else if (a_rows)
        pg.run_rows(reinterpret_cast<const float*>(a0) + oa[fold ? 0 : g] + i0 * ma.rs, ma.rs, bg, rows, cols, k, cg,
                    n, false);
      else pg.run_mm(ag, bg, rows, cols, k, cg, n, false);
      round_block(g * M * n + i0 * n + j0, rows, cols);
    }
  });
}

}  // namespace

void gemm_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
  EMBER_CHECK(std::max({m, n, k, lda, ldb, ldc}) <= INT32_MAX, Unsupported,
              "[gemm] a dim or leading dim exceeds BLAS's 32-bit limit");
  BlasCall guard;
  EMBER_SGEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
              1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}
void gemm_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                   int64_t ldb, double beta, double* c, int64_t ldc) {
  EMBER_CHECK(std::max({m, n, k, lda, ldb, ldc}) <= INT32_MAX, Unsupported,
              "[gemm] a dim or leading dim exceeds BLAS's 32-bit limit");
  BlasCall guard;
  EMBER_DGEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
              1.0, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

StoragePtr CpuStorage::matmul(const Layout& l, const BackendStorage& rhs_, const Layout& rl) const {
  const auto& rhs = as_cpu(rhs_);
  Shape os(l.shape().begin(), l.shape().end() - 1);
  os.push_back(rl.shape().back());
  const int64_t numel = shape_numel(os);
  switch (dtype_) {
    case DType::F32: {
      auto out = new_cpu(dtype_, numel);
      if (matmul_path() != MatmulPath::Blas) matmul_packed<float>(*this, l, rhs, rl, out->data<float>());
      else matmul_blas<float>(*this, l, rhs, rl, *out);
      return out;
    }
    case DType::F64: { auto out = new_cpu(dtype_, numel); matmul_blas<double>(*this, l, rhs, rl, *out); return out; }
    case DType::F16:
    case DType::BF16: {
      const MatmulPath path = matmul_path();
      if (path != MatmulPath::Blas) {  // converted to float while packing (or bf16 on AMX tiles), rounded once
        auto acc = new_cpu(DType::F32, numel);
        auto out = new_cpu(dtype_, numel);
        uint16_t* o16 = reinterpret_cast<uint16_t*>(out->raw());
        if (dtype_ == DType::F16) matmul_packed<f16>(*this, l, rhs, rl, acc->data<float>(), nullptr, o16);
        else
          matmul_packed<bf16>(*this, l, rhs, rl, acc->data<float>(), path == MatmulPath::Amx ? amx_gemm() : nullptr,
                              o16);
        return out;
      }
      // through f32: cast both operands (contiguous), multiply, round once
      StoragePtr a32 = to_dtype(l, DType::F32), b32 = rhs.to_dtype(rl, DType::F32);
      auto out = new_cpu(DType::F32, numel);
      matmul_blas<float>(as_cpu(*a32), Layout::contiguous(l.shape()), as_cpu(*b32), Layout::contiguous(rl.shape()),
                         *out);
      return out->to_dtype(Layout::contiguous(os), dtype_);
    }
    default: {
      EMBER_CHECK(dtype_ != DType::Bool, DType, "[matmul] not supported for bool");  // as torch
      auto out = new_cpu(dtype_, numel);
      EMBER_DISPATCH(dtype_, {
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) matmul_loop<T>(*this, l, rhs, rl, *out);
      });
      return out;
    }
  }
}

}  // namespace ember::cpu
