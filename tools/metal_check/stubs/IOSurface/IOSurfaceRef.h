// Stub for the libclang check of the metal-cpp adapter: IOSurfaceRef.
#pragma once
typedef struct __IOSurface* IOSurfaceRef;
