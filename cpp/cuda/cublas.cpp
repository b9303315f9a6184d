// cuBLAS through dlopen: the few entry points matmul needs, resolved by name from libcublas.so.13 (nvidia-cublas).
#include "cuda/cublas.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>

#include "error.h"

namespace ember::cuda {
namespace {

// cuBLAS / CUDA enum values (cublas_api.h, library_types.h): stable parts of their ABI.
constexpr int kOpN = 0, kOpT = 1, kGemmDefault = -1;
constexpr int kComputeF32 = 68, kComputeF64 = 70;
constexpr int kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;

struct Api {
  int (*create)(void**);
  int (*gemm)(void*, int, int, int, int, int, const void*, const void*, int, int, long long, const void*, int, int,
              long long, const void*, void*, int, int, long long, int, int, int);
  const char* (*status)(int);
};

std::mutex g_mu;
std::string g_path;
const Api* g_api = nullptr;
std::map<int, void*> g_handles;  // device ordinal -> cublasHandle_t (kept for the process)

// Loads `path` and resolves the entry points; nullptr with the reason in *why.
const Api* load(const std::string& path, std::string* why) {
  if (path.empty()) {
    *why = "cuBLAS is not installed: pip install nvidia-cublas (or pip install 'ember[cuda]')";
    return nullptr;
  }
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    *why = "cannot load " + path + ": " + (e ? e : "dlopen failed");
    return nullptr;
  }
  auto* api = new Api{};
  bool ok = true;
  auto sym = [&](const char* name) {
    void* p = ::dlsym(h, name);
    if (!p) *why = std::string(path) + " lacks " + name;
    ok = ok && p;
    return p;
  };
  api->create = reinterpret_cast<decltype(api->create)>(sym("cublasCreate_v2"));
  api->gemm = reinterpret_cast<decltype(api->gemm)>(sym("cublasGemmStridedBatchedEx"));
  api->status = reinterpret_cast<decltype(api->status)>(sym("cublasGetStatusString"));
  if (!ok) {
    delete api;
    return nullptr;
  }
  return api;
}

int data_type(DType dt) {
  switch (dt) {
    case DType::F32: return kR32F;
    case DType::F64: return kR64F;
    case DType::F16: return kR16F;
    case DType::BF16: return kR16BF;
    default: return -1;
  }
}

// An operand as cuBLAS sees it (column-major): its op and leading dimension, or false when it has no such form.
// Row-major X (r, c) with strides (rs, cs) is column-major X^T with ld rs when cs == 1 (op N of X^T), or
// column-major X with ld cs when rs == 1 (op T gives X^T); rows that overlap (a broadcast, rs < c) have neither.
bool as_column_major(int64_t r, int64_t c, int64_t rs, int64_t cs, int* op, int64_t* ld) {
  if ((cs == 1 || c == 1) && (r == 1 || rs >= std::max<int64_t>(c, 1))) {
    *op = kOpN;
    *ld = r == 1 ? std::max<int64_t>(c, 1) : rs;
    return true;
  }
  if ((rs == 1 || r == 1) && (c == 1 || cs >= std::max<int64_t>(r, 1))) {
    *op = kOpT;
    *ld = c == 1 ? std::max<int64_t>(r, 1) : cs;
    return true;
  }
  return false;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

bool cublas_plan(const RowMajorGemm& g, CublasCall* c) {
  if (data_type(g.dtype) < 0 || !fits_int(g.m) || !fits_int(g.n) || !fits_int(g.k) || !fits_int(g.batch) ||
      g.a_batch < 0 || g.b_batch < 0)
    return false;
  if (!as_column_major(g.k, g.n, g.b_row, g.b_col, &c->op_first, &c->ld_first) ||
      !as_column_major(g.m, g.k, g.a_row, g.a_col, &c->op_second, &c->ld_second))
    return false;
  c->m = g.n, c->n = g.m, c->k = g.k;
  c->ld_c = std::max<int64_t>(g.n, 1);
  c->stride_first = g.b_batch, c->stride_second = g.a_batch, c->stride_c = g.m * g.n;
  return fits_int(c->ld_first) && fits_int(c->ld_second);
}

void cublas_gemm(int dev, const RowMajorGemm& g) {
  CublasCall c;
  EMBER_CHECK(cublas_plan(g, &c), Value, "[matmul] this product's layout does not fit cuBLAS (the caller checks first)");
  const Api* api;
  void* handle;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_api) {
      std::string why;
      g_api = load(g_path, &why);
      EMBER_CHECK(g_api != nullptr, Device, "[matmul] ", why);
    }
    api = g_api;
    void*& h = g_handles[dev];
    if (!h) {
      const int rc = api->create(&h);
      EMBER_CHECK(rc == 0, Device, "[matmul] cublasCreate failed on cuda:", dev, ": ", api->status(rc));
    }
    handle = h;
  }
  const int t = data_type(g.dtype);
  const bool f64 = g.dtype == DType::F64;
  const float one = 1.0f, zero = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = f64 ? (const void*)&one_d : (const void*)&one;
  const void* beta = f64 ? (const void*)&zero_d : (const void*)&zero;
  const int rc = api->gemm(handle, c.op_first, c.op_second, (int)c.m, (int)c.n, (int)c.k, alpha, (const void*)g.b, t,
                           (int)c.ld_first, (long long)c.stride_first, (const void*)g.a, t, (int)c.ld_second,
                           (long long)c.stride_second, beta, (void*)g.c, t, (int)c.ld_c, (long long)c.stride_c,
                           (int)g.batch, f64 ? kComputeF64 : kComputeF32, kGemmDefault);
  EMBER_CHECK(rc == 0, Device, "[matmul] cublasGemmStridedBatchedEx failed on cuda:", dev, ": ", api->status(rc));
}

void set_cublas_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_path = path;
}

std::string cublas_library() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_path;
}

std::string cublas_check(const std::string& path) {
  std::string why;
  const Api* api = load(path, &why);
  if (!api) return why;
  delete api;  // the library stays loaded (dlopen's reference is never dropped)
  return "";
}

}  // namespace ember::cuda
