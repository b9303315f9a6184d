// BufferPool<T>: a GPU device's size-bucketed buffer pool (Metal's and CUDA's), plain C++ over opaque handles T
// (an MTL::Buffer*, an emulator buffer, a CUDA device address, an int in tests): reuse window, LRU release,
// memory limit, empty_cache.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <mutex>

#include "error.h"

namespace ember::gpu {

// The size class a request is served from: powers of two up to a page, then whole pages, so freed
// buffers of nearby sizes are interchangeable.
inline size_t bucket_size(size_t n, size_t page) {
  if (n <= 16) return 16;
  if (n < page) {
    size_t b = 16;
    while (b < n) b <<= 1;
    return b;
  }
  return (n + page - 1) / page * page;
}

template <class T> class BufferPool {
 public:
  using NewFn = std::function<T(size_t)>;      // a fresh device buffer of exactly that size (may throw)
  using ReleaseFn = std::function<void(T)>;    // gives a buffer back to the device
  // `who` ("metal", "cuda") starts the out-of-memory message.
  BufferPool(NewFn make, ReleaseFn release, size_t memory_limit, size_t cache_limit, size_t page = 16384,
             const char* who = "metal")
      : make_(std::move(make)), release_(std::move(release)), memory_limit_(memory_limit), cache_limit_(cache_limit),
        page_(page), who_(who) {}
  ~BufferPool() { empty_cache(); }

  // A buffer of at least `n` bytes (its size is bucket_size(n)). Reuses a cached buffer when one is at
  // most twice the bucket (or two pages) larger; otherwise allocates, first releasing cached buffers
  // (least recently freed first) to stay under the memory limit. Throws OutOfMemory past the limit.
  T alloc(size_t n, size_t* got = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t want = bucket_size(n, page_);
    auto it = cache_.lower_bound(want);
    if (it != cache_.end() && it->first < std::min(2 * want, want + 2 * page_)) {
      const size_t size = it->first;
      T b = it->second->buffer;
      lru_.erase(it->second);
      cache_.erase(it);
      cached_bytes_ -= size;
      active_bytes_ += size;
      peak_ = std::max(peak_, active_bytes_);
      ++hits_;
      if (got) *got = size;
      return b;
    }
    // A request that cannot fit even with an empty cache fails before releasing anything.
    EMBER_CHECK(want <= memory_limit_ && active_bytes_ <= memory_limit_ - want, Memory, "[", who_, "] out of memory: ", want,
                " bytes requested, ", active_bytes_, " in use, limit ", memory_limit_);
    if (active_bytes_ + cached_bytes_ + want > memory_limit_) release_lru_locked(active_bytes_ + cached_bytes_ + want - memory_limit_);
    T b = make_(want);
    active_bytes_ += want;
    peak_ = std::max(peak_, active_bytes_);
    ++misses_;
    if (got) *got = want;
    return b;
  }

  // Returns a buffer obtained from alloc (with the size alloc reported) to the cache, or to the device
  // when the cache is full.
  void free(T b, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    active_bytes_ -= size;
    if (size > cache_limit_) {
      release_(b);
      return;
    }
    if (cached_bytes_ + size > cache_limit_) release_lru_locked(cached_bytes_ + size - cache_limit_);
    lru_.push_front({b, size});
    cache_.emplace(size, lru_.begin());
    cached_bytes_ += size;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_lru_locked(cached_bytes_);
  }
  void set_memory_limit(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    memory_limit_ = n;
  }
  void set_cache_limit(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_limit_ = n;
    if (cached_bytes_ > n) release_lru_locked(cached_bytes_ - n);
  }

  // The peak restarts from what is in use now.
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = active_bytes_;
  }

  struct Stats {
    size_t active_bytes, cached_bytes, peak_bytes, cached_buffers, hits, misses, memory_limit, cache_limit;
  };
  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {active_bytes_, cached_bytes_, peak_, cache_.size(), hits_, misses_, memory_limit_, cache_limit_};
  }

 private:
  struct Entry {
    T buffer;
    size_t size;
  };
  // Releases cached buffers, least recently freed first, until at least `bytes` are released.
  void release_lru_locked(size_t bytes) {
    size_t freed = 0;
    while (freed < bytes && !lru_.empty()) {
      const Entry e = lru_.back();
      for (auto it = cache_.find(e.size); it != cache_.end() && it->first == e.size; ++it)
        if (it->second == std::prev(lru_.end())) {
          cache_.erase(it);
          break;
        }
      lru_.pop_back();
      cached_bytes_ -= e.size;
      freed += e.size;
      release_(e.buffer);
    }
  }

  NewFn make_;
  ReleaseFn release_;
  size_t memory_limit_, cache_limit_, page_;
  const char* who_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently freed
  std::multimap<size_t, typename std::list<Entry>::iterator> cache_;
  size_t active_bytes_ = 0, cached_bytes_ = 0, peak_ = 0, hits_ = 0, misses_ = 0;
};

}  // namespace ember::gpu
