// Stub for the libclang check of the metal-cpp adapter: CGColorSpaceRef.
#pragma once
typedef struct CGColorSpace* CGColorSpaceRef;
