// Top-k along one dim on CPU: per line, a bounded heap of the k best keys behind a threshold test on
// blocks of 64 keys (a vector compare; few keys ever pass it), or nth_element when k is a large part of
// the line; only the k chosen are sorted. With fewer lines than threads, long lines are cut into fixed
// chunks, selected in parallel and merged, so one vocab-sized row uses every thread.
#include "cpu/topk.h"

#include <algorithm>
#include <type_traits>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"
#include "families/sort.h"
#include "lines.h"
#include "registry.h"

namespace ember::cpu {
namespace {

template <typename K> inline bool nan_k(K v) { return v != v; }

// a comes before b in the output: sort's order (NaN largest, equal keys by index).
template <typename K> struct Better {
  bool largest;
  bool operator()(const TopkItem<K>& a, const TopkItem<K>& b) const {
    const bool an = nan_k(a.key), bn = nan_k(b.key);
    if (an != bn) return largest ? an : bn;
    if (!an && a.key != b.key) return largest ? a.key > b.key : a.key < b.key;
    return a.idx < b.idx;
  }
};

// Whether x may enter a heap whose worst key is thr: a superset of the exact test, cheap enough to
// vectorise. Mode 0: largest (a NaN enters), 1: smallest, 2: smallest while the worst kept is a NaN.
template <int Mode, typename K> inline bool may_enter(K x, K thr) {
  if constexpr (Mode == 0) return !(x <= thr);
  else if constexpr (Mode == 1) return x < thr;
  else return x == x;
}
template <int Mode, typename K> inline bool block_any(const K* x, int64_t m, K thr) {
  int any = 0;
  for (int64_t j = 0; j < m; ++j) any |= (int)may_enter<Mode>(x[j], thr);
  return any != 0;
}

// The min(k, n) best of x[0..n) into h (unsorted), as positions base + i.
template <typename K>
void select_range(const K* x, int64_t n, int64_t k, int64_t base, bool largest, std::vector<TopkItem<K>>& h) {
  const Better<K> cmp{largest};
  k = std::min(k, n);
  h.clear();
  if (k == 0) return;
  if (k * 8 >= n) {  // a large share of the line: one partition beats a heap
    h.resize((size_t)n);
    for (int64_t i = 0; i < n; ++i) h[i] = {x[i], base + i};
    if (k < n) std::nth_element(h.begin(), h.begin() + (k - 1), h.end(), cmp);
    h.resize((size_t)k);
    return;
  }
  h.resize((size_t)k);
  for (int64_t i = 0; i < k; ++i) h[i] = {x[i], base + i};
  std::make_heap(h.begin(), h.end(), cmp);  // the worst kept on top
  constexpr int64_t B = 64;
  for (int64_t i = k; i < n; i += B) {
    const K thr = h.front().key;
    const bool tn = nan_k(thr);
    if (largest && tn) return;  // a NaN is the worst kept: every later key comes after it
    const int64_t m = std::min(B, n - i);
    const bool any = largest ? block_any<0>(x + i, m, thr) : tn ? block_any<2>(x + i, m, thr)
                                                                : block_any<1>(x + i, m, thr);
    if (!any) continue;
    K t = thr;
    for (int64_t j = i; j < i + m; ++j) {
      // Exact, since every later key has a larger index than all kept: it must beat the worst strictly
      // (largest: or be the first NaN; smallest with a NaN worst: be any number).
      const K v = x[j];
      if (!(largest ? (v > t || (nan_k(v) && !nan_k(t))) : (nan_k(t) ? !nan_k(v) : v < t))) continue;
      std::pop_heap(h.begin(), h.end(), cmp);
      h.back() = TopkItem<K>{v, base + j};
      std::push_heap(h.begin(), h.end(), cmp);
      t = h.front().key;
      if (largest && nan_k(t)) return;
    }
  }
}

template <typename K>
void select_line(const K* x, int64_t n, int64_t k, bool largest, int64_t* ids, K* vals,
                 std::vector<TopkItem<K>>& work) {
  select_range(x, n, k, 0, largest, work);
  std::sort(work.begin(), work.end(), Better<K>{largest});
  for (int64_t j = 0; j < k; ++j) {
    ids[j] = work[j].idx;
    if (vals) vals[j] = work[j].key;
  }
}

// x[start..start+m) of a line as keys: the line itself when it is contiguous keys, else a copy in buf.
template <typename T, typename K>
const K* keys_of(const T* src, int64_t is, int64_t start, int64_t m, std::vector<K>& buf) {
  if constexpr (std::is_same_v<T, K>) {
    if (is == 1) return src + start;
  }
  buf.resize((size_t)m);
  const T* p = src + start * is;
  if (is == 1) {
    for (int64_t i = 0; i < m; ++i) buf[i] = load<T>(p[i]);
  } else {
    for (int64_t i = 0; i < m; ++i) buf[i] = load<T>(p[i * is]);
  }
  return buf.data();
}

template <typename T>
void topk_lines(const T* in, const Layout& l, int64_t dim, int64_t k, bool largest, T* vals, int64_t* ids) {
  using K = typename Acc<T>::type;
  const Lines ls = lines_along(l, dim, k);
  const int64_t n = ls.n, is = ls.a_step, os = ls.b_step, nlines = ls.count;
  if (k == 0 || nlines == 0) return;
  const Better<K> cmp{largest};
  auto write = [&](int64_t oo, const std::vector<TopkItem<K>>& h) {
    for (int64_t j = 0; j < k; ++j) {
      vals[oo + j * os] = store<T>(h[j].key);
      ids[oo + j * os] = h[j].idx;
    }
  };
  constexpr int64_t C = 16384;  // chunk length of long lines (fixed: results never depend on threads)
  // Chunks only where there are fewer lines than threads (each chunk pays its own heap's warm-up); the
  // selection is exact, so the result is the same either way.
  const int64_t nch = (k * 16 <= C && n >= 2 * C && nlines < get_num_threads()) ? (n + C - 1) / C : 1;
  if (nch == 1) {
    parallel_for(nlines, std::max<int64_t>(1, 32768 / n), [&](int64_t b, int64_t e) {
      std::vector<K> buf;
      std::vector<TopkItem<K>> h;
      for (int64_t r = b; r < e; ++r) {
        int64_t io = l.offset(), oo = 0;
        ls.offsets(r, io, oo);
        select_range(keys_of<T, K>(in + io, is, 0, n, buf), n, k, 0, largest, h);
        std::sort(h.begin(), h.end(), cmp);
        write(oo, h);
      }
    });
    return;
  }
  // (line, chunk) work items keep their k best as candidates; a second pass merges each line's.
  std::vector<TopkItem<K>> cand((size_t)(nlines * nch * k));
  std::vector<int64_t> counts((size_t)(nlines * nch));
  parallel_for(nlines * nch, 1, [&](int64_t b, int64_t e) {
    std::vector<K> buf;
    std::vector<TopkItem<K>> h;
    for (int64_t w = b; w < e; ++w) {
      const int64_t r = w / nch, start = (w % nch) * C, m = std::min(C, n - start);
      int64_t io = l.offset(), oo = 0;
      ls.offsets(r, io, oo);
      select_range(keys_of<T, K>(in + io, is, start, m, buf), m, k, start, largest, h);
      std::copy(h.begin(), h.end(), cand.begin() + w * k);
      counts[w] = (int64_t)h.size();
    }
  });
  parallel_for(nlines, 1, [&](int64_t b, int64_t e) {
    std::vector<TopkItem<K>> h;
    for (int64_t r = b; r < e; ++r) {
      h.clear();
      for (int64_t c = 0; c < nch; ++c) {
        auto from = cand.begin() + (r * nch + c) * k;
        h.insert(h.end(), from, from + counts[r * nch + c]);
      }
      std::nth_element(h.begin(), h.begin() + (k - 1), h.end(), cmp);
      std::sort(h.begin(), h.begin() + k, cmp);
      int64_t io = 0, oo = 0;
      ls.offsets(r, io, oo);
      write(oo, h);
    }
  });
}

}  // namespace

void select_topk(const float* x, int64_t n, int64_t k, bool largest, int64_t* ids, float* vals,
                 std::vector<TopkItem<float>>& work) {
  select_line(x, n, k, largest, ids, vals, work);
}
void select_topk(const double* x, int64_t n, int64_t k, bool largest, int64_t* ids, double* vals,
                 std::vector<TopkItem<double>>& work) {
  select_line(x, n, k, largest, ids, vals, work);
}

namespace {

std::tuple<StoragePtr, StoragePtr> topk(const BackendStorage& xs, const Layout& l, int64_t dim, int64_t k,
                                        bool largest) {
  const CpuStorage& x = as_cpu(xs);
  const int64_t n = l.shape()[dim];
  const int64_t numel = n == 0 ? 0 : l.numel() / n * k;
  auto vals = new_cpu(x.dtype(), numel);
  auto ids = new_cpu(DType::I64, numel);
  EMBER_DISPATCH_BOOL_AS_U8(x.dtype(),
                            topk_lines<T>(x.data<T>(), l, dim, k, largest, vals->data<T>(), ids->data<int64_t>()));
  return {vals, ids};
}

}  // namespace

void register_topk() { Kernels<Topk>::set(DeviceKind::Cpu, &topk); }

}  // namespace ember::cpu
