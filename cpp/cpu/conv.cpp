// Convolution windows on CPU: im2col (windows as columns, for a GEMM) and col2im (its adjoint, the sum back).
#include <algorithm>
#include <cstring>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"

namespace ember::cpu {
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

}  // namespace

StoragePtr CpuStorage::im2col(const Layout& l, const ConvGeom& g) const {
  StoragePtr out;
  switch (itemsize(dtype_)) {  // pure data movement: the element's size is all that matters
    case 1: out = im2col_typed<uint8_t>(*this, l, g, dtype_); break;
    case 2: out = im2col_typed<uint16_t>(*this, l, g, dtype_); break;
    case 4: out = im2col_typed<uint32_t>(*this, l, g, dtype_); break;
    default: out = im2col_typed<uint64_t>(*this, l, g, dtype_); break;
  }
  return out;
}

StoragePtr CpuStorage::col2im(const ConvGeom& g) const {
  switch (dtype_) {
    case DType::F32: return col2im_typed<float>(data<float>(), g, dtype_);
    case DType::F64: return col2im_typed<double>(data<double>(), g, dtype_);
    case DType::F16:
    case DType::BF16: {  // overlapping windows add up: sum in f32, round once
      auto c32 = to_dtype(Layout::contiguous({numel_}), DType::F32);
      auto x32 = col2im_typed<float>(as_cpu(*c32).data<float>(), g, DType::F32);
      return x32->to_dtype(Layout::contiguous({x32->numel()}), dtype_);
    }
    case DType::I64: return col2im_typed<int64_t>(data<int64_t>(), g, dtype_);
    case DType::U32: return col2im_typed<uint32_t>(data<uint32_t>(), g, dtype_);
    case DType::U8: return col2im_typed<uint8_t>(data<uint8_t>(), g, dtype_);
  }
  return nullptr;
}

}  // namespace ember::cpu
