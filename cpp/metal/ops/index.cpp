// Metal launchers for the index family: index_select, gather, index_add, scatter_add, index_copy.
#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {

StoragePtr index_select(const MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                        int64_t dim) {
  throw Error(ErrorKind::Unsupported, "[index_select] not yet implemented on metal");
}

StoragePtr gather(const MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il, int64_t dim) {
  throw Error(ErrorKind::Unsupported, "[gather] not yet implemented on metal");
}

void index_add(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
               const BackendStorage& src, const Layout& sl, int64_t dim) {
  throw Error(ErrorKind::Unsupported, "[index_add] not yet implemented on metal");
}

void scatter_add(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                 const BackendStorage& src, const Layout& sl, int64_t dim) {
  throw Error(ErrorKind::Unsupported, "[scatter_add] not yet implemented on metal");
}

void index_copy(MetalStorage& s, const Layout& l, const BackendStorage& ids, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim) {
  throw Error(ErrorKind::Unsupported, "[setitem] not yet implemented on metal");
}

}  // namespace ember::metal::ops
