// PipelineCache<P>: compiled kernels (Metal pipelines and libraries, CUDA modules) keyed by (hash of the source,
// function name, constants) - never by name alone - safe under threads: one compile per key, concurrent
// compiles of different keys.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

namespace ember::gpu {

struct PipelineKey {
  std::string source_hash;  // a digest of the full source text
  std::string function;
  std::string constants;    // a canonical text of the function constants ("" for none)
  bool operator<(const PipelineKey& o) const {
    return std::tie(source_hash, function, constants) < std::tie(o.source_hash, o.function, o.constants);
  }
};

template <class P> class PipelineCache {
 public:
  using Compile = std::function<P()>;

  // The pipeline for `key`, compiling it with `compile` on the first request. Other threads asking for
  // the same key wait for that compile; a compile that throws caches nothing (the next call retries).
  P get(const PipelineKey& key, const Compile& compile) {
    std::shared_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& slot = map_[key];
      if (!slot) slot = std::make_shared<Entry>();
      e = slot;
    }
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->value) {
      ++hits_;
      return *e->value;
    }
    e->value = compile();
    ++compiles_;
    return *e->value;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  uint64_t compiles() const { return compiles_; }
  uint64_t hits() const { return hits_; }
  // Visits every compiled pipeline (to release them) and forgets them.
  void clear(const std::function<void(P)>& release) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, e] : map_) {
      std::lock_guard<std::mutex> l(e->mu);
      if (e->value) release(*e->value);
    }
    map_.clear();
  }

 private:
  struct Entry {
    std::mutex mu;
    std::optional<P> value;
  };
  mutable std::mutex mu_;
  std::map<PipelineKey, std::shared_ptr<Entry>> map_;
  std::atomic<uint64_t> compiles_{0}, hits_{0};
};

}  // namespace ember::gpu
