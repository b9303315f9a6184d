// cuBLAS for matmul on an NVIDIA GPU: libcublas from PyPI's nvidia-cublas, loaded with dlopen at first use (a wheel
// needs no CUDA at build time). Never run on a GPU yet (docs/cuda.md); the emulator runs ember's own matmul kernel.
#pragma once
#include <cstdint>
#include <string>

#include "dtype.h"

namespace ember::cuda {

// One row-major batched product C[b] = A[b] @ B[b]: A (m, k), B (k, n), C (m, n) dense with row stride n.
// Each operand is addressed by element strides (row, column, batch); batch strides may be 0 (broadcast).
struct RowMajorGemm {
  DType dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  uint64_t a = 0, b = 0, c = 0;  // device addresses of element 0
  int64_t a_row = 0, a_col = 1, a_batch = 0;
  int64_t b_row = 0, b_col = 1, b_batch = 0;
};

// The column-major call that computes `g`: row-major C = A B is column-major C^T = B^T A^T, so cuBLAS's first
// operand is B and its second A, with m and n swapped. op: 0 (N) or 1 (T), as cublasOperation_t.
struct CublasCall {
  int op_first = 0, op_second = 0;
  int64_t m = 0, n = 0, k = 0;  // cuBLAS's: m = g.n, n = g.m
  int64_t ld_first = 1, ld_second = 1, ld_c = 1;
  int64_t stride_first = 0, stride_second = 0, stride_c = 0;
};
// The call for `g`, or false when cuBLAS cannot run it as it lies: not a float dtype, an operand with no unit
// stride (or rows that overlap, a broadcast), sizes or leading dims past int. The caller then copies the
// operands dense first, or runs ember's own kernel.
bool cublas_plan(const RowMajorGemm& g, CublasCall* call);

// Runs `g` on the current CUDA context's default stream (the caller made dev's context current; the handle is
// made once per device ordinal). Throws Error (Device) with cuBLAS's status string when a call fails.
void cublas_gemm(int dev, const RowMajorGemm& g);

// The library Python found in the nvidia-cublas package ("" until set); cublas_gemm loads it at first use.
void set_cublas_library(const std::string& path);
std::string cublas_library();
// Loads the library and resolves every entry point without touching a GPU: "" when it loads, else why not.
std::string cublas_check(const std::string& path);

}  // namespace ember::cuda
