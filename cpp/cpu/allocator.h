// Caching, 64-byte aligned host allocator: freed blocks are kept by size class and reused.
#pragma once
#include <cstddef>

namespace ember::cpu {

void* alloc_bytes(size_t nbytes);      // 64-byte aligned; nbytes may be 0
void free_bytes(void* p, size_t nbytes);  // returns the block to the cache
size_t cached_bytes();                 // bytes held in the cache (for tests/diagnostics)
void empty_cache();

}  // namespace ember::cpu
