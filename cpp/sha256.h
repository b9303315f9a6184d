// SHA-256 (FIPS 180-4), for the kernel cache's file names and content checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void final(uint8_t out[32]);  // the object must not be updated afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(const std::string& s) { return sha256_hex(s.data(), s.size()); }

}  // namespace ember
