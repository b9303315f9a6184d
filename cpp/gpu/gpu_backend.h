// The DeviceBackend of a GPU device (allocation, host copies, arange, the random fills, memory controls),
// written once over GpuDevice for every GPU backend; each backend's provider hands out one per device.
#pragma once
#include "device.h"  // cpp/device.h: DeviceBackend
#include "gpu/gpu_device.h"

namespace ember::gpu {

// The DeviceBackend of `dev`, made at the first call and kept for the process (devices live as long).
DeviceBackend* backend_of(GpuDevice& dev);

}  // namespace ember::gpu
