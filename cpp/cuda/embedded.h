// The CUDA emulator's shim and the files it includes, embedded in the library by file name.
#pragma once

namespace ember::cuda {

// Text of the embedded file `name` ("cuda_emu.h", "msl_abi.h", "dtype.h"), or nullptr.
const char* embedded_source(const char* name);

}  // namespace ember::cuda
