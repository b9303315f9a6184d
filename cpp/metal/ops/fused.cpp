// Metal launchers for the fused kernels: softmax / log_softmax, rms_norm, layer_norm, the activation
// backwards, scaled dot-product attention (forward and backward).
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr softmax_fwd(const MetalStorage& s, const Layout& l, bool log) {
  throw Error(ErrorKind::Unsupported, log ? "[log_softmax] not yet implemented on metal"
                                          : "[softmax] not yet implemented on metal");
}

StoragePtr softmax_bwd(const MetalStorage& s, const Layout& l, const BackendStorage& g, const Layout& lg, bool log) {
  throw Error(ErrorKind::Unsupported, log ? "[log_softmax] backward not yet implemented on metal"
                                          : "[softmax] backward not yet implemented on metal");
}

std::tuple<StoragePtr, StoragePtr> rms_norm_fwd(const MetalStorage& s, const Layout& l, const BackendStorage& w,
                                                const Layout& lw, double eps) {
  throw Error(ErrorKind::Unsupported, "[rms_norm] not yet implemented on metal");
}

std::tuple<StoragePtr, StoragePtr> rms_norm_bwd(const MetalStorage& s, const Layout& l, const BackendStorage& w,
                                                const Layout& lw, const BackendStorage& rstd,
                                                const BackendStorage& g, const Layout& lg) {
  throw Error(ErrorKind::Unsupported, "[rms_norm] backward not yet implemented on metal");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_fwd(const MetalStorage& s, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb, double eps) {
  throw Error(ErrorKind::Unsupported, "[layer_norm] not yet implemented on metal");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> layer_norm_bwd(const MetalStorage& s, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg) {
  throw Error(ErrorKind::Unsupported, "[layer_norm] backward not yet implemented on metal");
}

StoragePtr act_bwd(const MetalStorage& s, ActKind kind, const Layout& l, const BackendStorage& g, const Layout& lg) {
  throw Error(ErrorKind::Unsupported, cat_str("[", act_name(kind), "] backward not yet implemented on metal"));
}

std::tuple<StoragePtr, StoragePtr> sdpa_fwd(const MetalStorage& s, const SdpaArgs& a) {
  throw Error(ErrorKind::Unsupported, "[sdpa] not yet implemented on metal");
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> sdpa_bwd(const MetalStorage& s, const SdpaArgs& a,
                                                        const BackendStorage& o, const Layout& lo,
                                                        const BackendStorage& lse, const BackendStorage& g,
                                                        const Layout& lg) {
  throw Error(ErrorKind::Unsupported, "[sdpa] backward not yet implemented on metal");
}

}  // namespace ember::metal::ops
