// Caching, 64-byte aligned host allocator: freed blocks are kept by size class and reused.
#pragma once
#include <cstddef>

#include "device.h"

namespace ember::cpu {

void* alloc_bytes(size_t nbytes);      // 64-byte aligned; nbytes may be 0
void free_bytes(void* p, size_t nbytes);  // returns the block to the cache
size_t cached_bytes();                 // bytes held in the cache (for tests/diagnostics)
void empty_cache();

// What the allocator holds (see ember::MemoryStats), in bytes of size classes (what a block really
// occupies).
MemoryStats memory_stats();
void reset_peak_memory();
// Caps the cache at `bytes` (trimming it now if it holds more); freed blocks past the cap go back to
// the system. The default is 2 GiB.
void set_cache_limit(size_t bytes);

}  // namespace ember::cpu
