// The CPU's DeviceBackend (allocation from the caching allocator, host copies, arange/random).
#pragma once
#include "device.h"

namespace ember::cpu {
DeviceBackend& backend();
}  // namespace ember::cpu
