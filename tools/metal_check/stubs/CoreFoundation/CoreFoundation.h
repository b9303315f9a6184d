// Stub for the libclang check of the metal-cpp adapter: the CoreFoundation names metal-cpp uses.
#pragma once
#include <stdint.h>
typedef double CFTimeInterval;
typedef long CFIndex;
typedef const void* CFTypeRef;
