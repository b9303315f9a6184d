// Storage-level API: creation on a device (through its DeviceBackend) and the checked entry points
// (same device, dtypes, shapes, version bumps of in-place writes) that forward to the backend.
#pragma once
#include "backend.h"
#include "device.h"
// the geometry and op kinds of the registry families whose entry points are declared here
#include "families/conv.h"
#include "families/pool.h"
#include "families/scan.h"
#include "families/scatter.h"
#include "families/upsample.h"

namespace ember {

StoragePtr alloc(Device dev, DType dt, int64_t numel, bool zeroed);
StoragePtr full(Device dev, DType dt, int64_t numel, double value);
StoragePtr arange(Device dev, DType dt, double start, double step, int64_t n);
// Seeded uniform [lo, hi) or normal(mean, std); the global generator advances by n draws.
StoragePtr rand_uniform(Device dev, DType dt, int64_t n, double lo, double hi);
StoragePtr rand_normal(Device dev, DType dt, int64_t n, double mean, double std);

void check_same_device(const BackendStorage& a, const BackendStorage& b, const char* op);
void check_same_dtype(const BackendStorage& a, const BackendStorage& b, const char* op);
// Raises "[op] ..." unless l has a stride per dim, countable dims, and stays inside s. Every entry
// point below calls it for each (storage, layout) it is given.
void check_in_bounds(const BackendStorage& s, const Layout& l, const char* op);

// Each returns the result storage and its (contiguous) layout.
std::pair<StoragePtr, Layout> unary(UnaryOp op, const BackendStorage& s, const Layout& l, double p0 = 0,
                                    double p1 = 0);
std::pair<StoragePtr, Layout> binary(BinaryOp op, const BackendStorage& a, const Layout& la,
                                     const BackendStorage& b, const Layout& lb);
std::pair<StoragePtr, Layout> where(const BackendStorage& c, const Layout& lc, const BackendStorage& a,
                                    const Layout& la, const BackendStorage& b, const Layout& lb);
std::pair<StoragePtr, Layout> to_dtype(const BackendStorage& s, const Layout& l, DType dt);
std::pair<StoragePtr, Layout> reduce(ReduceOp op, const BackendStorage& s, const Layout& l,
                                     std::vector<int64_t> dims, bool keepdim);
std::pair<StoragePtr, Layout> matmul(const BackendStorage& a, const Layout& la, const BackendStorage& b,
                                     const Layout& lb);
std::pair<StoragePtr, Layout> contiguous_copy(const BackendStorage& s, const Layout& l);
// A dense copy of (s, l) on `dev` (any pair of devices): made contiguous on the source device, then
// to_host there and from_host on dev, through host memory. dev must support the dtype.
std::pair<StoragePtr, Layout> to_device(const BackendStorage& s, const Layout& l, Device dev);
void copy_into(const BackendStorage& src, const Layout& sl, BackendStorage& dst, const Layout& dl,
               const char* op);
void fill(BackendStorage& s, const Layout& l, double value);
std::pair<StoragePtr, Layout> index_select(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                           const Layout& il, int64_t dim);
std::pair<StoragePtr, Layout> gather(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                     const Layout& il, int64_t dim);
// Returns a new storage: a copy of (s, l) with src added at ids (index_add / scatter_add semantics).
std::pair<StoragePtr, Layout> index_add(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                        const Layout& il, const BackendStorage& src, const Layout& sl,
                                        int64_t dim);
std::pair<StoragePtr, Layout> scatter_add(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                          const Layout& il, const BackendStorage& src, const Layout& sl,
                                          int64_t dim);
// In place: writes src's slices into (dst, l) at ids along dim (t[ids] = src), in index order. Every
// index is checked before anything is written; a source sharing dst's buffer is read from a snapshot.
void index_copy(BackendStorage& dst, const Layout& l, const BackendStorage& ids, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim);
// The same added into fresh zeros of `shape` (no copy of a zero tensor): the backward of index_select
// and gather.
std::pair<StoragePtr, Layout> index_add_zeros(const Shape& shape, const BackendStorage& ids, const Layout& il,
                                              const BackendStorage& src, const Layout& sl, int64_t dim);
std::pair<StoragePtr, Layout> scatter_add_zeros(const Shape& shape, const BackendStorage& ids, const Layout& il,
                                                const BackendStorage& src, const Layout& sl, int64_t dim);
// Returns a new storage: a dense copy of (s, l) with src combined in at ids along dim by `op`
// (BackendStorage::scatter_reduce). ids and src have the same shape, with dims fitting l's outside dim.
std::pair<StoragePtr, Layout> scatter_reduce(ScatterOp op, const BackendStorage& s, const Layout& l,
                                             const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                                             const Layout& sl, int64_t dim, bool include_self);
std::pair<StoragePtr, Layout> cat(const std::vector<const BackendStorage*>& ss, const std::vector<Layout>& ls,
                                  int64_t dim);
// Convolution windows: (s, l) of shape (n, c, h, w) as columns (n, c*kh*kw, oh*ow), and the adjoint,
// columns summed back into (n, c, h, w). Geometry and sizes are checked before anything is allocated.
std::pair<StoragePtr, Layout> im2col(const BackendStorage& s, const Layout& l, const ConvGeom& g);
std::pair<StoragePtr, Layout> col2im(const BackendStorage& s, const Layout& l, const ConvGeom& g);
// conv2d in one kernel per direction (BackendStorage::conv2d_*): x (n, c, h, w), w (c_out, c/groups, kh,
// kw), b (c_out,) or null, gy (n, c_out, oh, ow); same device and float dtype, checked here. Return y,
// dx and dw with their contiguous layouts.
std::pair<StoragePtr, Layout> conv2d_fwd(const BackendStorage& x, const Layout& lx, const BackendStorage& w,
                                         const Layout& lw, const BackendStorage* b, const Layout* lb, const ConvGeom& g,
                                         int64_t groups);
std::pair<StoragePtr, Layout> conv2d_bwd_input(const BackendStorage& gy, const Layout& lg, const BackendStorage& w,
                                               const Layout& lw, const ConvGeom& g, int64_t groups);
std::pair<StoragePtr, Layout> conv2d_bwd_weight(const BackendStorage& x, const Layout& lx, const BackendStorage& gy,
                                                const Layout& lg, const ConvGeom& g, int64_t groups);
// Pooling and resampling (BackendStorage::pool2d / upsample): (s, l) of shape (n, c, h, w), a float
// dtype; the geometry is checked (positive sizes, windows that fit, counts an int64 holds) before anything
// is allocated. pool2d returns (values, Max's indices when asked, else null, their layout); the
// backwards take the output's gradient (any layout) and return dx (n, c, h, w).
std::tuple<StoragePtr, StoragePtr, Layout> pool2d(PoolKind kind, const BackendStorage& s, const Layout& l,
                                                  const PoolGeom& g, bool with_indices);
std::pair<StoragePtr, Layout> pool2d_bwd(PoolKind kind, const BackendStorage& g, const Layout& lg,
                                         const BackendStorage* ids, const Layout* il, const PoolGeom& geom);
std::pair<StoragePtr, Layout> upsample(UpsampleMode mode, const BackendStorage& s, const Layout& l,
                                       const UpsampleGeom& g);
std::pair<StoragePtr, Layout> upsample_bwd(UpsampleMode mode, const BackendStorage& g, const Layout& lg,
                                           const UpsampleGeom& geom);
// Sorts (s, l) along dim (negative counts from the end; a 0-d tensor is one line of one element):
// returns (values, int64 indices, their contiguous layout).
std::tuple<StoragePtr, StoragePtr, Layout> sort(const BackendStorage& s, const Layout& l, int64_t dim,
                                                bool descending, bool stable);
// Scans (s, l) along dim (BackendStorage::scan): returns (values, indices or null, their layout).
std::tuple<StoragePtr, StoragePtr, Layout> scan(ScanOp op, const BackendStorage& s, const Layout& l, int64_t dim,
                                                bool exclusive, bool reverse);
// The k first elements of (s, l) along dim in sort's order (BackendStorage::topk; a 0-d tensor is one line
// of one element): returns (values, int64 indices, their contiguous layout).
std::tuple<StoragePtr, StoragePtr, Layout> topk(const BackendStorage& s, const Layout& l, int64_t dim, int64_t k,
                                                bool largest);
// num_samples draws per row of the weights (s, l), 1-D or 2-D float, whose values the caller has checked
// (finite, non-negative, positive row sums); draws from the global generator. int64 (rows, S) or (S,).
std::pair<StoragePtr, Layout> multinomial(const BackendStorage& s, const Layout& l, int64_t num_samples,
                                          bool replacement);

}  // namespace ember
