// CommitPolicy: when the shared command buffer is committed - after max_ops dispatches or max_mb
// megabytes of buffers touched - so the GPU starts early and a command buffer never grows unbounded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace ember::metal::policy {

class CommitPolicy {
 public:
  CommitPolicy(uint32_t max_ops, size_t max_mb) : max_ops_(max_ops ? max_ops : 1), max_bytes_(max_mb << 20) {}
  // Defaults, overridable by EMBER_METAL_MAX_OPS_PER_BUFFER and EMBER_METAL_MAX_MB_PER_BUFFER.
  static CommitPolicy from_env(uint32_t ops = 40, size_t mb = 40) {
    if (const char* e = std::getenv("EMBER_METAL_MAX_OPS_PER_BUFFER")) ops = (uint32_t)std::strtoul(e, nullptr, 10);
    if (const char* e = std::getenv("EMBER_METAL_MAX_MB_PER_BUFFER")) mb = (size_t)std::strtoul(e, nullptr, 10);
    return CommitPolicy(ops, mb);
  }
  // Counts one dispatch touching `bytes` of buffers; true when the command buffer should be committed
  // now (the caller commits, then calls committed()).
  bool dispatch(size_t bytes) {
    ++ops_;
    bytes_ += bytes;
    return ops_ >= max_ops_ || bytes_ >= max_bytes_;
  }
  void committed() { ops_ = 0, bytes_ = 0; }
  uint32_t ops() const { return ops_; }
  size_t bytes() const { return bytes_; }

 private:
  uint32_t max_ops_;
  size_t max_bytes_;
  uint32_t ops_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ember::metal::policy
