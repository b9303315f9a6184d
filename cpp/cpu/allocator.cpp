// Caching allocator: size classes (powers of two below 1 MiB, 64 KiB steps above), a bounded cache that
// is trimmed when the system refuses memory, byte counters, and its fork handlers.
#include "cpu/allocator.h"

#include <pthread.h>

#include <atomic>
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
constexpr size_t kDefaultCacheLimit = size_t(2) << 30;  // keep at most 2 GiB of freed blocks

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
  std::map<size_t, std::vector<void*>> free;  // guarded by mu, as are held and limit
  size_t held = 0;
  size_t limit = kDefaultCacheLimit;
  // Counters outside the lock (a cache miss allocates without it).
  std::atomic<size_t> allocated{0}, peak{0};
};
// Leaked on purpose: storages may be freed during interpreter exit. A plain global, so the fork
// handlers below can lock its mutex without a function-local static's guard.
Cache* const g_cache = new Cache();
Cache& cache() { return *g_cache; }

// fork() while another thread holds the cache lock would leave it locked forever in the child.
void fork_prepare() { g_cache->mu.lock(); }
void fork_release() { g_cache->mu.unlock(); }
const int g_atfork_registered = pthread_atfork(fork_prepare, fork_release, fork_release);

void note_alloc(Cache& c, size_t cls) {
  const size_t now = c.allocated.fetch_add(cls, std::memory_order_relaxed) + cls;
  size_t pk = c.peak.load(std::memory_order_relaxed);
  while (now > pk && !c.peak.compare_exchange_weak(pk, now, std::memory_order_relaxed)) {
  }
}

// Frees cached blocks, largest first, until the cache holds at most `keep` bytes. Under c.mu.
void trim_locked(Cache& c, size_t keep) {
  for (auto it = c.free.end(); c.held > keep && it != c.free.begin();) {
    --it;
    auto& blocks = it->second;
    while (!blocks.empty() && c.held > keep) {
      std::free(blocks.back());
      blocks.pop_back();
      c.held -= it->first;
    }
    if (blocks.empty()) it = c.free.erase(it);
  }
}

// Big blocks are 2 MiB aligned and marked for transparent huge pages: streaming kernels over tens of
// MiB then miss the TLB far less, and a first touch faults in 2 MiB instead of 4 KiB.
constexpr size_t kHugeMin = size_t(4) << 20;
constexpr size_t kHugePage = size_t(2) << 20;

void* raw_alloc(size_t cls) {
  void* p = nullptr;
  // posix_memalign, not std::aligned_alloc: macOS has the latter only from 10.15 (an x86-64 wheel targets older)
  if (cls < kHugeMin) return posix_memalign(&p, kAlign, cls) == 0 ? p : nullptr;
  if (posix_memalign(&p, kHugePage, cls) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  madvise(p, cls, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
  return p;
}

}  // namespace

void* alloc_bytes(size_t nbytes) {
  (void)g_atfork_registered;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.free.find(cls);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.held -= cls;
      note_alloc(c, cls);
      return p;
    }
  }
  void* p = raw_alloc(cls);
  if (!p) {
    empty_cache();  // the system refused: give back every cached block, then try once more
    p = raw_alloc(cls);
    // The caller's op is not known here; the size is what a user needs to see the mistake.
    if (!p) {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f", (double)nbytes / double(size_t(1) << 30));
      throw Error(ErrorKind::Memory, cat_str("[alloc] out of memory: could not allocate ", nbytes, " bytes (", gib, " GiB)"));
    }
  }
  note_alloc(c, cls);
  return p;
}

void free_bytes(void* p, size_t nbytes) {
  if (!p) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  c.allocated.fetch_sub(cls, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.held + cls <= c.limit) {
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
  trim_locked(c, 0);
}

MemoryStats memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return {c.allocated.load(), c.held, c.peak.load(), c.limit};
}

void reset_peak_memory() {
  Cache& c = cache();
  c.peak.store(c.allocated.load());
}

void set_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  c.limit = bytes;
  trim_locked(c, bytes);
}

}  // namespace ember::cpu
