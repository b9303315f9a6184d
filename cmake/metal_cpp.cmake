# metal-cpp (Apple's C++ interface to Metal) for the Apple adapter, on Apple builds with EMBER_METAL only.
# Pinned by hash; -DFETCHCONTENT_SOURCE_DIR_METAL_CPP=/path/to/metal-cpp uses a local copy (offline builds).
include(FetchContent)
FetchContent_Declare(metal_cpp
  URL https://developer.apple.com/metal/cpp/files/metal-cpp_26.zip
  URL_HASH SHA256=4df3c078b9aadcb516212e9cb03004cbc5ce9a3e9c068fa3144d021db585a3a4)
FetchContent_GetProperties(metal_cpp)
if(NOT metal_cpp_POPULATED)
  FetchContent_Populate(metal_cpp)  # headers only: the archive has no CMake project
endif()
find_library(EMBER_METAL_FW Metal REQUIRED)
find_library(EMBER_FOUNDATION_FW Foundation REQUIRED)
find_library(EMBER_QUARTZCORE_FW QuartzCore REQUIRED)
target_sources(ember_metal PRIVATE ${PROJECT_SOURCE_DIR}/cpp/metal/apple/apple_adapter.cpp)
target_include_directories(ember_metal SYSTEM PRIVATE ${metal_cpp_SOURCE_DIR})
target_link_libraries(ember_metal PUBLIC ${EMBER_METAL_FW} ${EMBER_FOUNDATION_FW} ${EMBER_QUARTZCORE_FW})
target_compile_definitions(ember_metal PUBLIC EMBER_HAS_METAL_CPP=1)
