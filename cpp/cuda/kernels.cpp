// ember's kernels on CUDA: the .metal sources, preprocessed at build time (cpp/cuda/CMakeLists.txt), translated by
// the MSL rewriter's CUDA mode once per process and prefixed with the prelude metal/msl_cuda.h.
#include "cuda/kernels.h"

#include <memory>
#include <mutex>

#include "cuda/embedded.h"
#include "error.h"
#include "msl/rewrite.h"

namespace ember::cuda {
namespace pre {  // cuda_pre_embedded.cpp (cmake/embed_sources.cmake)
const char* embedded_source(const char* name);
int embedded_source_count();
const char* embedded_source_name(int i);
}  // namespace pre
namespace pre64 {  // cuda_pre64_embedded.cpp: the same files preprocessed with EMBER_CUDA_F64=1
const char* embedded_source(const char* name);
}  // namespace pre64

const TranslatedSource& translated_source(const std::string& metal_file, bool f64) {
  static std::mutex mu;
  // By (file, f64); leaked: lives to exit.
  static auto* cache = new std::map<std::pair<std::string, bool>, std::unique_ptr<TranslatedSource>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find({metal_file, f64}); it != cache->end()) return *it->second;
  const char* src = f64 ? pre64::embedded_source(metal_file.c_str()) : pre::embedded_source(metal_file.c_str());
  if (!src) {
    std::string have;
    for (const std::string& f : kernel_files()) have += (have.empty() ? "" : ", ") + f;
    throw Error(ErrorKind::Value, "[cuda] no kernel file '" + metal_file + "' (ember's are: " + have + ")");
  }
  const char* prelude = embedded_source("msl_cuda.h");
  EMBER_CHECK(prelude != nullptr, Value, "[cuda] this build lacks the embedded msl_cuda.h");
  metal::emu::RewriteResult rw = metal::emu::rewrite_msl(src, metal_file, metal::emu::RewriteMode::Cuda, f64);
  auto t = std::make_unique<TranslatedSource>();
  t->label = metal_file + (f64 ? " (CUDA, float64)" : " (CUDA)");
  t->text = std::string("#line 1 \"msl_cuda.h\"\n") + prelude + "\n" + rw.text;
  for (metal::emu::CudaKernelParams& k : rw.cuda) {
    KernelSig s;
    s.buffers = std::move(k.buffers);
    s.value_size = std::move(k.value_size);
    s.threadgroup = std::move(k.threadgroup);
    t->kernels[k.host_name] = std::move(s);
  }
  return *cache->emplace(std::make_pair(metal_file, f64), std::move(t)).first->second;
}

std::vector<std::string> kernel_files() {
  std::vector<std::string> out;
  for (int i = 0; i < pre::embedded_source_count(); ++i) out.push_back(pre::embedded_source_name(i));
  return out;
}

}  // namespace ember::cuda
