// CpuStorage lifetime: buffers from the caching allocator or borrowed with a release callback.
#include "cpu/cpu_storage.h"

#include <cstring>

#include "cpu/allocator.h"

namespace ember::cpu {

CpuStorage::CpuStorage(DType dtype, int64_t numel, bool zeroed)
    : BackendStorage(dtype, Device{DeviceKind::Cpu, 0}, numel) {
  // Every CPU buffer is made here (alloc, arange, rand, CpuStorage.empty): a negative count or one
  // whose byte size wraps would hand out a buffer smaller than numel says.
  EMBER_CHECK(numel >= 0 && numel <= INT64_MAX / (int64_t)itemsize(dtype), Value, "[alloc] cannot allocate ",
              numel, " elements of ", dtype_name(dtype));
  data_ = alloc_bytes(nbytes());
  if (zeroed) std::memset(data_, 0, nbytes());
}

CpuStorage::CpuStorage(DType dtype, int64_t numel, void* data, std::function<void()> release)
    : BackendStorage(dtype, Device{DeviceKind::Cpu, 0}, numel), data_(data), release_(std::move(release)) {}

CpuStorage::~CpuStorage() {
  if (release_) release_();
  else free_bytes(data_, nbytes());
}

bool CpuStorage::same_buffer(const BackendStorage& other) const {
  if (other.device() != device()) return false;
  const auto& o = static_cast<const CpuStorage&>(other);
  const char* a = static_cast<const char*>(data_);
  const char* b = static_cast<const char*>(o.data_);
  // Overlapping byte ranges count as the same buffer (borrowed memory may alias partially).
  return a < b + o.nbytes() && b < a + nbytes() && nbytes() > 0 && o.nbytes() > 0;
}

}  // namespace ember::cpu
