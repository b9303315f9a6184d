// HazardTracker<K>: which dispatches of a shared compute encoder need a memory barrier (RAW, WAR, WAW on
// a buffer K), and which earlier encoders' fences a dispatch must wait on (the same three, across
// encoders); plain C++ over opaque keys.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace ember::metal::policy {

template <class K> class HazardTracker {
 public:
  // Registers a dispatch that reads `reads` and writes `writes`; returns true when a barrier must be
  // encoded before it: it reads what an earlier dispatch since the last barrier wrote (RAW), or writes
  // what one read (WAR) or wrote (WAW). Dispatches on disjoint buffers need none.
  bool dispatch(const std::vector<K>& reads, const std::vector<K>& writes) {
    bool barrier = false;
    for (const K& r : reads) barrier |= writes_.count(r) > 0;
    for (const K& w : writes) barrier |= writes_.count(w) > 0 || reads_.count(w) > 0;
    if (barrier) {  // the barrier orders everything before it
      reads_.clear();
      writes_.clear();
      ++barriers_;
    }
    reads_.insert(reads.begin(), reads.end());
    writes_.insert(writes.begin(), writes.end());
    encoder_reads_.insert(reads.begin(), reads.end());
    encoder_writes_.insert(writes.begin(), writes.end());
    return barrier;
  }

  // The encoder ends (id names it); its outputs (and inputs, for WAR) stay pending until `completed(id)`.
  void end_encoder(uint64_t id) {
    for (const K& w : encoder_writes_) writer_[w] = id;
    for (const K& r : encoder_reads_) readers_[r].insert(id);
    encoder_reads_.clear();
    encoder_writes_.clear();
    reads_.clear();
    writes_.clear();
  }
  // Encoders whose fence a new encoder reading `reads` must wait on (they wrote one of them).
  std::set<uint64_t> fences_for(const std::vector<K>& reads) const {
    std::set<uint64_t> f;
    for (const K& r : reads)
      if (auto it = writer_.find(r); it != writer_.end()) f.insert(it->second);
    return f;
  }
  // The same for a dispatch that also writes `writes`: the pending encoders that wrote what it reads
  // (RAW), or wrote or read what it writes (WAW, WAR).
  std::set<uint64_t> fences_for(const std::vector<K>& reads, const std::vector<K>& writes) const {
    std::set<uint64_t> f = fences_for(reads);
    for (const K& w : writes) {
      if (auto it = writer_.find(w); it != writer_.end()) f.insert(it->second);
      if (auto it = readers_.find(w); it != readers_.end()) f.insert(it->second.begin(), it->second.end());
    }
    return f;
  }
  // The command buffer holding encoder `id` finished: its buffers need no fence any more.
  void completed(uint64_t id) {
    for (auto it = writer_.begin(); it != writer_.end();) it = it->second == id ? writer_.erase(it) : std::next(it);
    for (auto it = readers_.begin(); it != readers_.end();) {
      it->second.erase(id);
      it = it->second.empty() ? readers_.erase(it) : std::next(it);
    }
  }
  uint64_t barriers() const { return barriers_; }
  size_t pending_outputs() const { return writer_.size(); }

 private:
  std::set<K> reads_, writes_, encoder_reads_, encoder_writes_;
  std::map<K, uint64_t> writer_;
  std::map<K, std::set<uint64_t>> readers_;
  uint64_t barriers_ = 0;
};

}  // namespace ember::metal::policy
