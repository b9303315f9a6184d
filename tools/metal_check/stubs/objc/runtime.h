// Stub for the libclang check of the metal-cpp adapter on Linux: the Objective-C runtime types metal-cpp names.
#pragma once
#include <math.h>  // the SDK headers bring INFINITY in early; MTLAccelerationStructureTypes.hpp uses it
#include <stddef.h>
typedef struct objc_class* Class;
struct objc_object {  // NS::Object derives from it, so it must be complete
  Class isa;
};
typedef struct objc_object* id;
typedef struct objc_selector* SEL;
typedef signed char BOOL;
extern "C" SEL sel_registerName(const char*);
extern "C" Class objc_lookUpClass(const char*);
extern "C" id objc_getClass(const char*);
extern "C" id objc_getProtocol(const char*);
extern "C" BOOL class_addMethod(Class, SEL, void (*)(void), const char*);
