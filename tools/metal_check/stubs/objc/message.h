// Stub for the libclang check of the metal-cpp adapter: objc_msgSend and friends (never called here).
#pragma once
#include "objc/runtime.h"
extern "C" void objc_msgSend(void);
extern "C" void objc_msgSend_stret(void);
extern "C" void objc_msgSend_fpret(void);
