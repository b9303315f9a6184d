// Caching allocator: size classes (powers of two below 1 MiB, 64 KiB steps above), bounded cache.
#include "cpu/allocator.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "error.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ember::cpu {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t(2) << 30;  // keep at most 2 GiB of freed blocks

size_t size_class(size_t n) {
  if (n <= 64) return 64;
  if (n < (size_t(1) << 20)) {
    size_t c = 64;
    while (c < n) c <<= 1;
    return c;
  }
  const size_t step = size_t(64) << 10;
  return (n + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
  size_t held = 0;
  ~Cache() {
    for (auto& kv : free)
      for (void* p : kv.second) std::free(p);
  }
};
Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storages may be freed during interpreter exit
  return *c;
}

// Big blocks are 2 MiB aligned and marked for transparent huge pages: streaming kernels over tens of
// MiB then miss the TLB far less, and a first touch faults in 2 MiB instead of 4 KiB.
constexpr size_t kHugeMin = size_t(4) << 20;
constexpr size_t kHugePage = size_t(2) << 20;

void* raw_alloc(size_t cls) {
  if (cls < kHugeMin) return std::aligned_alloc(kAlign, cls);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, cls) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  madvise(p, cls, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
  return p;
}

}  // namespace

void* alloc_bytes(size_t nbytes) {
  size_t cls = size_class(nbytes);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.free.find(cls);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.held -= cls;
      return p;
    }
  }
  void* p = raw_alloc(cls);
  if (!p) {
    empty_cache();
    p = raw_alloc(cls);
    // The caller's op is not known here; the size is what a user needs to see the mistake.
    if (!p) {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f", (double)nbytes / double(size_t(1) << 30));
      throw Error(ErrorKind::Memory, cat_str("[alloc] out of memory: could not allocate ", nbytes, " bytes (", gib, " GiB)"));
    }
  }
  return p;
}

void free_bytes(void* p, size_t nbytes) {
  if (!p) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.held + cls <= kMaxCached) {
      c.free[cls].push_back(p);
      c.held += cls;
      return;
    }
  }
  std::free(p);
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.held;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  for (auto& kv : c.free)
    for (void* p : kv.second) std::free(p);
  c.free.clear();
  c.held = 0;
}

}  // namespace ember::cpu
