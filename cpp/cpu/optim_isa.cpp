// Per-ISA fused optimizer steps (SGD, Adam/AdamW, RMSprop): torch's single-tensor update, op for op,
// in one pass over memory. Built with -ffp-contract=off (cpp/CMakeLists.txt): the FMAs are the explicit
// std::fma calls, exactly where torch's CPU kernels fuse (add with alpha, lerp, addcmul), and nowhere else.
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "cpu/fused.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_OCAT2(a, b) a##b
#define EMBER_OCAT(a, b) EMBER_OCAT2(a, b)

namespace ember::cpu {
// Internal linkage, so the three ISA copies never get merged by the linker.
namespace {

// torch.maximum: a NaN in either operand gives NaN.
template <typename T> inline T nan_max(T a, T b) { return a != a ? a : (b != b ? b : (b > a ? b : a)); }

// torch's lerp(a, b, w) on CPU: fma(w, b - a, a) for |w| < 0.5, else fma(w - 1, b - a, b); wc is w or w - 1.
template <bool Small, typename T> inline T lerp(T a, T b, T wc) { return std::fma(wc, b - a, Small ? a : b); }

// SGD. K bits: 1 maximize, 2 weight decay, 4 momentum, 8 nesterov, 16 first step (buf = g).
// s: wd, momentum, 1 - dampening, -lr.
template <typename T, unsigned K>
void sgd_k(T* __restrict p, const T* __restrict g, T* __restrict buf, T*, T*, int64_t n, const double* s) {
  constexpr bool MX = K & 1, WD = K & 2, MOM = K & 4, NES = K & 8, FIRST = K & 16;
  const T wd = (T)s[0], mom = (T)s[1], damp1 = (T)s[2], nlr = (T)s[3];
  for (int64_t i = 0; i < n; ++i) {
    T gi = MX ? -g[i] : g[i];
    if (WD) gi = std::fma(p[i], wd, gi);            // grad.add(param, alpha=wd)
    if (MOM) {
      const T b = FIRST ? gi : std::fma(gi, damp1, buf[i] * mom);  // buf.mul_(m).add_(grad, alpha=1-d)
      buf[i] = b;
      gi = NES ? std::fma(b, mom, gi) : b;         // grad.add(buf, alpha=momentum)
    }
    p[i] = std::fma(gi, nlr, p[i]);                // param.add_(grad, alpha=-lr)
  }
}

// Adam / AdamW. K bits: 1 maximize, 2 weight decay, 4 decoupled (AdamW), 8 amsgrad, 16 |1 - beta1| < 0.5.
// s: wd (AdamW: 1 - lr * wd), 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^t), eps, -lr / (1 - beta1^t).
template <typename T, unsigned K>
void adam_k(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax, int64_t n,
            const double* s) {
  constexpr bool MX = K & 1, WD = K & 2, DEC = K & 4, AMS = K & 8, SMALL = K & 16;
  const T wd = (T)s[0], w = (T)s[1], b2 = (T)s[2], omb2 = (T)s[3], bc2 = (T)s[4], eps = (T)s[5], nss = (T)s[6];
  const T wc = SMALL ? w : w - T(1);
  const T rbc2 = T(1) / bc2;  // rounded to nearest: Markstein's correction below makes sqrt(v) / bc2 exact
  for (int64_t i = 0; i < n; ++i) {
    T gi = MX ? -g[i] : g[i];
    T pi = p[i];
    if (WD) {
      if (DEC) pi = pi * wd;                       // param.mul_(1 - lr * wd)
      else gi = std::fma(pi, wd, gi);              // grad.add(param, alpha=wd)
    }
    const T mi = lerp<SMALL>(m[i], gi, wc);        // exp_avg.lerp_(grad, 1 - beta1)
    m[i] = mi;
    T vi = std::fma(omb2 * gi, gi, v[i] * b2);     // exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2)
    v[i] = vi;
    if (AMS) {
      vi = nan_max(vmax[i], vi);                   // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=...)
      vmax[i] = vi;
    }
    // (sqrt(v) / bc2_sqrt).add_(eps). The divide by the step's constant is q = s * (1 / bc2) plus the
    // FMA residual times 1 / bc2 (Markstein): the correctly rounded quotient, as the divide gives it, for one
    // divider op less per element (the step was divider-bound: sqrt and two divides). inf stays inf.
    // Base x86-64 has no FMA instruction (std::fma would be a call per element): it keeps the divide.
    const T sv = std::sqrt(vi);
#if defined(__FMA__)
    const T q0 = sv * rbc2, q = std::fma(std::fma(-q0, bc2, sv), rbc2, q0);
    const T den = (sv == T(INFINITY) ? sv : q) + eps;
#else
    const T den = sv / bc2 + eps;
    (void)rbc2;
#endif
    p[i] = pi + (nss * mi) / den;                  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

// RMSprop. K bits: 1 maximize, 2 weight decay, 4 momentum, 8 centered, 16 |1 - alpha| < 0.5.
// s: wd, alpha, 1 - alpha, eps, momentum, -lr.
template <typename T, unsigned K>
void rmsprop_k(T* __restrict p, const T* __restrict g, T* __restrict sq, T* __restrict ga, T* __restrict buf,
               int64_t n, const double* s) {
  constexpr bool MX = K & 1, WD = K & 2, MOM = K & 4, CEN = K & 8, SMALL = K & 16;
  const T wd = (T)s[0], alpha = (T)s[1], oma = (T)s[2], eps = (T)s[3], mom = (T)s[4], nlr = (T)s[5];
  const T wc = SMALL ? oma : oma - T(1);
  for (int64_t i = 0; i < n; ++i) {
    T gi = MX ? -g[i] : g[i];
    if (WD) gi = std::fma(p[i], wd, gi);
    const T si = std::fma(oma * gi, gi, sq[i] * alpha);  // square_avg.mul_(alpha).addcmul_(g, g, value=1-alpha)
    sq[i] = si;
    T avg;
    if (CEN) {
      const T gai = lerp<SMALL>(ga[i], gi, wc);     // grad_avg.lerp_(grad, 1 - alpha)
      ga[i] = gai;
      avg = std::sqrt(std::fma(-gai, gai, si));     // square_avg.addcmul(ga, ga, value=-1).sqrt_()
    } else {
      avg = std::sqrt(si);
    }
    avg = avg + eps;
    if (MOM) {
      const T b = buf[i] * mom + gi / avg;          // buf.mul_(momentum).addcdiv_(grad, avg)
      buf[i] = b;
      p[i] = std::fma(b, nlr, p[i]);                // param.add_(buf, alpha=-lr)
    } else {
      p[i] = p[i] + (nlr * gi) / avg;               // param.addcdiv_(grad, avg, value=-lr)
    }
  }
}

template <typename T> using StepK = void (*)(T*, const T*, T*, T*, T*, int64_t, const double*);

template <typename T> struct Kernels {
  template <size_t... K> static constexpr auto sgd(std::index_sequence<K...>) { return std::array<StepK<T>, 32>{&sgd_k<T, K>...}; }
  template <size_t... K> static constexpr auto adam(std::index_sequence<K...>) { return std::array<StepK<T>, 32>{&adam_k<T, K>...}; }
  template <size_t... K> static constexpr auto rms(std::index_sequence<K...>) { return std::array<StepK<T>, 32>{&rmsprop_k<T, K>...}; }
};

// Picks the instantiation for the flags (and the lerp form for the weight in T) and runs it on n elements.
template <typename T>
void optim_k(OptimKind kind, uint32_t flags, const double* s, void* p, const void* g, void* s0, void* s1, void* s2,
             int64_t n) {
  static constexpr auto sgd = Kernels<T>::sgd(std::make_index_sequence<32>{});
  static constexpr auto adam = Kernels<T>::adam(std::make_index_sequence<32>{});
  static constexpr auto rms = Kernels<T>::rms(std::make_index_sequence<32>{});
  const bool mx = flags & kOptMaximize, wd = flags & kOptWeightDecay, mom = flags & kOptMomentum;
  unsigned key = 0;
  const StepK<T>* tab = nullptr;
  if (kind == OptimKind::Sgd) {
    key = mx | wd << 1 | mom << 2 | !!(flags & kOptNesterov) << 3 | !!(flags & kOptFirst) << 4;
    tab = sgd.data();
  } else if (kind == OptimKind::Adam) {
    key = mx | wd << 1 | !!(flags & kOptDecoupled) << 2 | !!(flags & kOptAmsgrad) << 3 |
          (std::fabs((T)s[1]) < T(0.5)) << 4;
    tab = adam.data();
  } else {
    key = mx | wd << 1 | mom << 2 | !!(flags & kOptCentered) << 3 | (std::fabs((T)s[2]) < T(0.5)) << 4;
    tab = rms.data();
  }
  tab[key]((T*)p, (const T*)g, (T*)s0, (T*)s1, (T*)s2, n, s);
}

}  // namespace

void EMBER_OCAT(register_fused_optim_, EMBER_ISA)(FusedTable& t) {
  t.optim[(int)DType::F32] = &optim_k<float>;
  t.optim[(int)DType::F64] = &optim_k<double>;
}

}  // namespace ember::cpu
