// Batched matmul on CPU through BLAS (OpenBLAS from scipy-openblas32, Accelerate on macOS): f32/f64
// natively, f16/bf16 through f32, integers with a plain loop. Any strides; operands BLAS cannot read
// directly are copied once.
#include <algorithm>
#include <atomic>
#include <climits>
#include <pthread.h>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/gemm.h"
#include "cpu/nditer.h"
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
    case DType::F32: { auto out = new_cpu(dtype_, numel); matmul_blas<float>(*this, l, rhs, rl, *out); return out; }
    case DType::F64: { auto out = new_cpu(dtype_, numel); matmul_blas<double>(*this, l, rhs, rl, *out); return out; }
    case DType::F16:
    case DType::BF16: {
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
