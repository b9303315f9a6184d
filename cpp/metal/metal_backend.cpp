// The Metal DeviceBackend's provider (the backend itself is the GPU layer's, gpu/gpu_backend.cpp, over
// MetalDevice) and the registration of the shared launchers for DeviceKind::Metal.
#include "../device.h"  // the device registry (a quoted "device.h" here would find metal/device.h)
#include "gpu/gpu_backend.h"
#include "gpu/gpu_storage.h"
#include "metal/device.h"

namespace ember::metal {
namespace {

DeviceBackend* provider(int index) {
  MetalDevice* dev = MetalDevice::get(index);
  return dev ? gpu::backend_of(*dev) : nullptr;
}

}  // namespace

void register_backend() {
  set_backend_provider(DeviceKind::Metal, &provider);
  gpu::register_kernels(DeviceKind::Metal);
}

}  // namespace ember::metal
