// The Metal sources embedded in the library (metal/*.metal and the emulator's shim), by file name.
#pragma once

namespace ember::metal {

// Text of the embedded file `name` ("unary.metal", "msl_cpu.h", ...), or nullptr.
const char* embedded_source(const char* name);
int embedded_source_count();
const char* embedded_source_name(int i);

}  // namespace ember::metal
