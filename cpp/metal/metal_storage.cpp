// MetalStorage: a buffer from the device's pool, with the dtype check and out-of-memory reported as the op's.
#include "metal/metal_storage.h"

#include <climits>

namespace ember::metal {

namespace {
size_t checked_bytes(const MetalDevice& dev, DType dt, int64_t numel, const char* op) {
  dev.check_dtype(dt, op);
  EMBER_CHECK(numel >= 0 && numel <= INT64_MAX / (int64_t)itemsize(dt), Value, "[", op, "] cannot allocate ", numel,
              " elements of ", dtype_name(dt));
  return (size_t)numel * itemsize(dt);
}

// A buffer from dev's pool; running out of memory is reported as the op's error, as on the CPU.
BufferRef pooled(MetalDevice& dev, size_t bytes, const char* op) {
  try {
    return dev.alloc(bytes);
  } catch (const Error& e) {
    if (e.kind != ErrorKind::Memory) throw;
    std::string m = e.what();
    if (m.rfind("[metal] ", 0) == 0) m = m.substr(8);
    throw Error(ErrorKind::Memory, cat_str("[", op, "] ", m, " (", dev.device().str(), ")"));
  }
}
}  // namespace

MetalStorage::MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, const char* op)
    : MetalStorageView(dev, dtype, numel, pooled(dev, checked_bytes(dev, dtype, numel, op), op), 0) {}

MetalStorage::MetalStorage(MetalDevice& dev, DType dtype, int64_t numel, BufferRef buffer, size_t byte_offset)
    : MetalStorageView(dev, dtype, numel, std::move(buffer), byte_offset) {
  checked_bytes(dev, dtype, numel, "alloc");
}

}  // namespace ember::metal
