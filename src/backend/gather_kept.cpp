// gather_rows_kept (backend.h): rows of a tensor gathered into a buffer the
// caller keeps across steps.
#include "backend/backend.h"

#include <algorithm>

namespace loom {

Tensor gather_rows_kept(Backend& backend, const Tensor& x, const std::vector<int32_t>& rows, Tensor& keep) {
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t cols = x.cols();
  const bool fits = keep.data() != nullptr && keep.ndim() == 2 && keep.dtype() == x.dtype() &&
                    keep.dim(1) == cols && keep.dim(0) >= n;
  if (!fits) {
    // Geometric growth, but never past the source's rows (a gather rarely
    // takes more) unless this one does.
    const int64_t grown = keep.data() != nullptr && keep.ndim() == 2 ? 2 * keep.dim(0) : 0;
    keep = backend.alloc(x.dtype(), {std::max(n, std::min(grown, x.rows())), cols});
  }
  Tensor out = keep.slice_rows(0, n);
  backend.gather_rows(x, rows, out);
  return out;
}

}  // namespace loom
