// The fused optimizer step's CPU host side: one parameter's update split across the pool, or many
// parameters' updates (optim_step_multi) in one parallel pass over blocks of every tensor. The per-ISA
// update loops are cpu/optim_isa.cpp; arguments arrive checked (cpp/fused.cpp).
#include <algorithm>
#include <utility>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/fused.h"
#include "cpu/parallel.h"
#include "families/optim.h"
#include "registry.h"

namespace ember::cpu {
namespace {

void optim_step(const OptimArgs& a) {
  const OptimFn fn = fused_kernels().optim[(int)a.p->dtype()];
  const int64_t isz = (int64_t)itemsize(a.p->dtype());
  auto at = [&](const BackendStorage* s, int64_t off) { return s ? (char*)as_cpu(*s).raw() + off * isz : nullptr; };
  char* p = at(a.p, a.off_p);
  const char* g = at(a.g, a.off_g);
  char* st[3] = {at(a.st[0], a.off_st[0]), at(a.st[1], a.off_st[1]), at(a.st[2], a.off_st[2])};
  // Elements are independent, so any split gives the same bits.
  parallel_for(a.n, 1 << 15, [&](int64_t b, int64_t e) {
    auto sh = [&](char* q) { return q ? q + b * isz : nullptr; };
    fn(a.kind, a.flags, a.s, sh(p), g + b * isz, sh(st[0]), sh(st[1]), sh(st[2]), e - b);
  });
}

// Many steps in one parallel pass: every tensor cut into blocks of at most kOptBlock elements, the blocks
// of all tensors shared among the threads (a bias of 256 elements is one block, not one pool call). Steps
// whose buffers overlap another step's run one after another instead, as separate calls would.
void optim_step_multi(const std::vector<OptimArgs>& steps) {
  constexpr int64_t kOptBlock = int64_t(1) << 14;
  struct Span { const char *b, *e; size_t step; };
  std::vector<Span> spans;
  int64_t total = 0, nblk = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const OptimArgs& a = steps[i];
    total += a.n, nblk += (a.n + kOptBlock - 1) / kOptBlock;
    const int64_t bytes = a.n * (int64_t)itemsize(a.p->dtype());
    auto add = [&](const BackendStorage* s, int64_t off) {
      if (s && a.n) {
        const char* q = (const char*)as_cpu(*s).raw() + off * (int64_t)itemsize(a.p->dtype());
        spans.push_back({q, q + bytes, i});
      }
    };
    add(a.p, a.off_p), add(a.g, a.off_g);
    for (int k = 0; k < 3; ++k) add(a.st[k], a.off_st[k]);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.b < y.b; });
  // Overlap between different steps (within one step the seam allows only g's reads of nothing written).
  const char* reach = nullptr;
  size_t reach_step = 0;
  for (const Span& sp : spans) {
    if (reach && sp.b < reach && sp.step != reach_step) {
      for (const OptimArgs& a : steps) if (a.n) optim_step(a);
      return;
    }
    if (!reach || sp.e > reach) reach = sp.e, reach_step = sp.step;
  }
  std::vector<std::pair<uint32_t, int64_t>> blocks;  // (step, first element)
  blocks.reserve(nblk);
  for (size_t i = 0; i < steps.size(); ++i)
    for (int64_t b = 0; b < steps[i].n; b += kOptBlock) blocks.push_back({(uint32_t)i, b});
  auto run = [&](int64_t b0, int64_t b1) {
    for (int64_t k = b0; k < b1; ++k) {
      const OptimArgs& a = steps[blocks[k].first];
      const int64_t b = blocks[k].second, isz = (int64_t)itemsize(a.p->dtype());
      auto at = [&](const BackendStorage* s, int64_t off) {
        return s ? (char*)as_cpu(*s).raw() + (off + b) * isz : nullptr;
      };
      fused_kernels().optim[(int)a.p->dtype()](a.kind, a.flags, a.s, at(a.p, a.off_p), at(a.g, a.off_g),
                                             at(a.st[0], a.off_st[0]), at(a.st[1], a.off_st[1]),
                                             at(a.st[2], a.off_st[2]), std::min(kOptBlock, a.n - b));
    }
  };
  if (total <= (int64_t(1) << 15)) run(0, (int64_t)blocks.size());  // optim_step's grain: one thread
  else parallel_for((int64_t)blocks.size(), 1, run);
}

}  // namespace

void register_optim() {
  Kernels<OptimStep>::set(DeviceKind::Cpu, &optim_step);
  Kernels<OptimStepMulti>::set(DeviceKind::Cpu, &optim_step_multi);
}

}  // namespace ember::cpu
