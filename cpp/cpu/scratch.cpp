// thread_scratch (see fused.h): per-thread kernel scratch, kept in a baseline object on purpose.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/fused.h"

namespace ember::cpu {

void* thread_scratch(Scratch slot, size_t bytes) {
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf bufs[(int)Scratch::Count];
  Buf& b = bufs[(int)slot];
  if (b.cap < bytes) {
    const size_t cap = (std::max(bytes, 2 * b.cap) + 63) / 64 * 64;
    void* p = nullptr;  // posix_memalign: std::aligned_alloc is macOS 10.15+ only
    if (posix_memalign(&p, 64, cap) != 0) throw std::bad_alloc();
    std::memset(p, 0, cap);  // finite padding, as std::vector's growth gave (old contents are not kept)
    std::free(b.p);
    b.p = p;
    b.cap = cap;
  }
  return b.p;
}

}  // namespace ember::cpu
