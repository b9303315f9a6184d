// Caching allocator: size classes (powers of two below 1 MiB, 64 KiB steps above), bounded cache.
#include "cpu/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

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
  void* p = std::aligned_alloc(kAlign, cls);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlign, cls);
    if (!p) throw std::bad_alloc();
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
