// Layout: the view rules (transpose, narrow, broadcast, reshape-as-view, ...) and shape helpers.
#include "layout.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace ember {

int64_t checked_numel(const Shape& s, const char* op) {
  // Overflow-checked: a wrapped count would let a tiny buffer pass for a huge tensor. Zero dims are
  // counted as 1 so that the strides of an empty shape cannot overflow either.
  EMBER_CHECK((int64_t)s.size() <= kMaxRank, Shape, "[", op, "] ", s.size(), " dims; at most ", kMaxRank,
              " are supported");
  int64_t n = 1;
  bool empty = false;
  for (auto d : s) {
    EMBER_CHECK(d >= 0, Shape, "[", op, "] negative dimension in shape ", shape_str(s));
    empty |= d == 0;
    EMBER_CHECK(!__builtin_mul_overflow(n, std::max<int64_t>(d, 1), &n), Shape, "[", op, "] shape ",
                shape_str(s), " has more elements than an int64 can count");
  }
  return empty ? 0 : n;
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) {
    if (d == 0) return 0;
    // Checked (cheap): every count that sizes an allocation or a loop comes through here.
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return checked_numel(s, "numel");
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = (int64_t)s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  EMBER_CHECK(dim >= lo && dim <= hi, Index, "[", op, "] dim ", dim, " out of range for a tensor with ", ndim,
              " dims");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(da == db || da == 1 || db == 1, Shape, "[", op, "] shapes ", shape_str(a), " and ", shape_str(b),
                " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  checked_numel(out, op);  // (2**32, 1) + (1, 2**32) is a valid pair with an uncountable result
  return out;
}

bool Layout::is_contiguous() const {
  if (numel() == 0) return true;  // no element to place: every empty layout is contiguous (as torch)
  int64_t acc = 1;
  for (int64_t i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (stride_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

std::optional<std::pair<int64_t, int64_t>> Layout::contiguous_offsets() const {
  if (!is_contiguous()) return std::nullopt;
  return std::make_pair(offset_, offset_ + numel());
}

std::pair<int64_t, int64_t> Layout::extent() const {
  if (numel() == 0) return {offset_, offset_};
  // In 128 bits and saturated: hand-made strides such as 2**62 must not wrap back into range.
  __int128 lo = offset_, hi = offset_;
  for (int64_t i = 0; i < ndim(); ++i) {
    __int128 span = (__int128)(shape_[i] - 1) * stride_[i];
    if (span < 0) lo += span; else hi += span;
  }
  auto sat = [](__int128 v) {
    return (int64_t)std::min<__int128>(std::max<__int128>(v, INT64_MIN), INT64_MAX);
  };
  return {sat(lo), sat(hi + 1)};
}

namespace {
// A view's elements as runs of consecutive offsets: its dims of size > 1 sorted by stride, the smallest merged
// while contiguous (1, then each next stride the run so far), the rest kept as outer dims.
struct Runs {
  int64_t run = 1;
  Shape shape, stride;
  explicit Runs(const Layout& l) {
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
    for (int64_t i = 0; i < l.ndim(); ++i)
      if (l.shape()[i] != 1) dims.push_back({l.stride()[i], l.shape()[i]});
    std::sort(dims.begin(), dims.end(), [](auto x, auto y) { return std::abs(x.first) < std::abs(y.first); });
    size_t i = 0;
    for (; i < dims.size() && dims[i].first == run; ++i) run *= dims[i].second;
    for (size_t j = dims.size(); j-- > i;) stride.push_back(dims[j].first), shape.push_back(dims[j].second);
  }
  // Calls f(first, count) for each run, from offset off.
  template <class F> void each(int64_t off, F&& f) const {
    const int outer = (int)shape.size();
    std::vector<int64_t> idx(outer, 0);
    for (int d = 0; d >= 0;) {
      f(off, run);
      for (d = outer - 1; d >= 0; --d) {
        off += stride[d];
        if (++idx[d] < shape[d]) break;
        off -= idx[d] * stride[d];
        idx[d] = 0;
      }
    }
  }
};
}  // namespace

bool Layout::shares_element_with(const Layout& other) const {
  if (numel() == 0 || other.numel() == 0) return false;
  const auto [alo, aend] = extent();
  const auto [blo, bend] = other.extent();
  const int64_t lo = std::max(alo, blo), hi = std::min(aend, bend) - 1;
  if (lo > hi) return false;
  const Runs ra(*this), rb(other);
  // Runs that sit in disjoint places of a period every outer stride divides never meet.
  int64_t period = 0;
  for (const Runs* r : {&ra, &rb})
    for (int64_t st : r->stride) period = std::gcd(period, st < 0 ? -st : st);
  if (period > 0 && ra.run + rb.run <= period) {
    const auto mod = [&](int64_t x) { return ((x % period) + period) % period; };
    if (mod(other.offset_ - offset_) >= ra.run && mod(offset_ - other.offset_) >= rb.run) return false;
  }
  // Else a bitmap of this view's elements over the common range, tested with the other's.
  std::vector<uint64_t> bits((hi - lo) / 64 + 1, 0);
  // Visits the words of bits [s, s + n) clipped to [lo, hi]; stops when f returns true.
  const auto words = [&](int64_t s, int64_t n, auto&& f) {
    int64_t x = std::max(s, lo) - lo, e = std::min(s + n - 1, hi) - lo + 1;
    while (x < e) {
      const int64_t w = x / 64, y = std::min(e, (w + 1) * 64);
      const uint64_t m = (y - x == 64 ? ~0ull : ((1ull << (y - x)) - 1)) << (x % 64);
      if (f(bits[w], m)) return true;
      x = y;
    }
    return false;
  };
  ra.each(offset_, [&](int64_t s, int64_t n) { words(s, n, [](uint64_t& w, uint64_t m) { return w |= m, false; }); });
  bool hit = false;
  rb.each(other.offset_, [&](int64_t s, int64_t n) {
    hit = hit || words(s, n, [](uint64_t& w, uint64_t m) { return (w & m) != 0; });
  });
  return hit;
}

Layout Layout::transpose(int64_t d0, int64_t d1) const {
  d0 = normalize_dim(d0, ndim(), "transpose");
  d1 = normalize_dim(d1, ndim(), "transpose");
  Layout l = *this;
  if (ndim() == 0) return l;
  std::swap(l.shape_[d0], l.shape_[d1]);
  std::swap(l.stride_[d0], l.stride_[d1]);
  return l;
}

Layout Layout::permute(const std::vector<int64_t>& dims) const {
  EMBER_CHECK((int64_t)dims.size() == ndim(), Shape, "[permute] expected ", ndim(), " dims, got ", dims.size());
  std::vector<bool> seen(ndim(), false);
  Layout l = *this;
  for (int64_t i = 0; i < ndim(); ++i) {
    int64_t d = normalize_dim(dims[i], ndim(), "permute");
    EMBER_CHECK(!seen[d], Value, "[permute] dim ", d, " repeated in ", shape_str(dims));
    seen[d] = true;
    l.shape_[i] = shape_[d];
    l.stride_[i] = stride_[d];
  }
  return l;
}

Layout Layout::narrow(int64_t dim, int64_t start, int64_t len) const {
  dim = normalize_dim(dim, ndim(), "narrow");
  EMBER_CHECK(ndim() > 0, Index, "[narrow] cannot narrow a 0-dim tensor");
  // start <= size - len, not start + len <= size: the sum can overflow.
  EMBER_CHECK(start >= 0 && len >= 0 && start <= shape_[dim] - len, Index, "[narrow] start ", start,
              " + length ", len, " out of range for dim ", dim, " of size ", shape_[dim]);
  Layout l = *this;
  l.shape_[dim] = len;
  l.offset_ += start * stride_[dim];
  return l;
}

Layout Layout::slice(int64_t dim, int64_t start, int64_t stop, int64_t step) const {
  dim = normalize_dim(dim, ndim(), "index");
  EMBER_CHECK(step >= 1, Value, "[index] slice step must be >= 1, got ", step);
  int64_t n = shape_[dim];
  auto clampi = [n](int64_t i) { i = i < 0 ? i + n : i; return std::min(std::max<int64_t>(i, 0), n); };
  start = clampi(start);
  stop = clampi(stop);
  int64_t len = stop > start ? 1 + (stop - start - 1) / step : 0;  // no overflow for step near 2**63
  Layout l = *this;
  l.shape_[dim] = len;
  l.stride_[dim] = len > 1 ? stride_[dim] * step : stride_[dim];  // a huge unused step must not overflow
  l.offset_ += len > 0 ? start * stride_[dim] : 0;
  return l;
}

Layout Layout::select(int64_t dim, int64_t index) const {
  dim = normalize_dim(dim, ndim(), "index");
  EMBER_CHECK(ndim() > 0, Index, "[index] too many indices for a 0-dim tensor");
  int64_t n = shape_[dim];
  EMBER_CHECK(index >= -n && index < n, Index, "[index] index ", index, " out of range for dim ", dim,
              " of size ", n);
  if (index < 0) index += n;
  Layout l = *this;
  l.offset_ += index * stride_[dim];
  l.shape_.erase(l.shape_.begin() + dim);
  l.stride_.erase(l.stride_.begin() + dim);
  return l;
}

Layout Layout::broadcast_as(const Shape& shape) const {
  EMBER_CHECK(shape.size() >= shape_.size(), Shape, "[broadcast_as] cannot broadcast ", shape_str(shape_),
              " to ", shape_str(shape));
  checked_numel(shape, "broadcast_as");  // negative or uncountable target shapes
  size_t extra = shape.size() - shape_.size();
  Shape st(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t want = shape[extra + i];
    if (shape_[i] == want) st[extra + i] = want == 1 ? 0 : stride_[i];
    else EMBER_CHECK(shape_[i] == 1, Shape, "[broadcast_as] cannot broadcast ", shape_str(shape_), " to ",
                     shape_str(shape));
  }
  return Layout(shape, st, offset_);
}

Layout Layout::squeeze(int64_t dim) const {
  dim = normalize_dim(dim, ndim(), "squeeze");
  Layout l = *this;
  if (ndim() == 0 || shape_[dim] != 1) return l;  // like torch: squeezing a non-1 dim is a no-op
  l.shape_.erase(l.shape_.begin() + dim);
  l.stride_.erase(l.stride_.begin() + dim);
  return l;
}

Layout Layout::unsqueeze(int64_t dim) const {
  EMBER_CHECK(ndim() < kMaxRank, Shape, "[unsqueeze] a tensor of ", ndim(), " dims cannot get another; at most ",
              kMaxRank, " are supported");
  dim = normalize_dim(dim, ndim() + 1, "unsqueeze");
  Layout l = *this;
  int64_t st = dim < ndim() ? shape_[dim] * stride_[dim] : 1;
  l.shape_.insert(l.shape_.begin() + dim, 1);
  l.stride_.insert(l.stride_.begin() + dim, st);
  return l;
}

Shape resolve_reshape(const Shape& req, int64_t numel) {
  Shape s = req;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      EMBER_CHECK(infer < 0, Shape, "[reshape] only one dim can be -1, got ", shape_str(req));
      infer = (int64_t)i;
    } else {
      EMBER_CHECK(s[i] >= 0, Shape, "[reshape] invalid shape ", shape_str(req));
      EMBER_CHECK(!__builtin_mul_overflow(known, s[i], &known), Shape, "[reshape] cannot reshape ", numel,
                  " elements into ", shape_str(req));
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, Shape, "[reshape] cannot reshape ", numel,
                " elements into ", shape_str(req));
    s[infer] = numel / known;
  }
  EMBER_CHECK(checked_numel(s, "reshape") == numel, Shape, "[reshape] cannot reshape ", numel, " elements into ",
              shape_str(req));
  return s;
}

// A view exists when each group of old dims merged into new dims is itself "contiguous" within
// the group (the rule torch's view uses).
std::optional<Layout> Layout::reshape(const Shape& shape) const {
  EMBER_CHECK(checked_numel(shape, "reshape") == numel(), Shape, "[reshape] cannot view ", numel(),
              " elements as ", shape_str(shape));
  if (is_contiguous()) return Layout::contiguous(shape, offset_);
  Shape osh, ost;  // old dims without size-1s
  for (int64_t i = 0; i < ndim(); ++i)
    if (shape_[i] != 1) { osh.push_back(shape_[i]); ost.push_back(stride_[i]); }
  if (shape_numel(shape) == 0) return Layout::contiguous(shape, offset_);
  Shape nst(shape.size(), 0);
  size_t oi = 0;
  int64_t ni = 0, nn = (int64_t)shape.size();
  while (ni < nn) {
    if (shape[ni] == 1) { nst[ni] = 1; ++ni; continue; }
    // take old dims until their product matches a run of new dims
    if (oi >= osh.size()) return std::nullopt;
    int64_t oprod = osh[oi];
    size_t oend = oi + 1;
    int64_t nprod = shape[ni];
    int64_t nend = ni + 1;
    while (oprod != nprod) {
      if (oprod < nprod) {
        if (oend >= osh.size()) return std::nullopt;
        if (ost[oend - 1] != osh[oend] * ost[oend]) return std::nullopt;
        oprod *= osh[oend++];
      } else {
        while (nend < nn && shape[nend] == 1) ++nend;
        if (nend >= nn) return std::nullopt;
        nprod *= shape[nend++];
      }
    }
    // new dims [ni, nend) span old dims [oi, oend) which are mutually contiguous
    int64_t st = ost[oend - 1];
    for (int64_t j = nend - 1; j >= ni; --j) {
      nst[j] = st;
      st *= shape[j];
    }
    ni = nend;
    oi = oend;
  }
  if (oi != osh.size()) return std::nullopt;
  return Layout(shape, nst, offset_);
}

std::string Layout::repr() const {
  std::ostringstream o;
  o << "Layout(shape=" << shape_str(shape_) << ", stride=" << shape_str(stride_) << ", start_offset=" << offset_
    << ")";
  return o.str();
}

}  // namespace ember
