#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/huge_pages.h"

namespace loom {

Tensor::Tensor(void* data, DType dtype, std::vector<int64_t> shape, Device device,
               std::shared_ptr<void> owner)
    : data_(data), dtype_(dtype), shape_(std::move(shape)), device_(device), owner_(std::move(owner)) {
  for (int64_t d : shape_) LOOM_CHECK(d >= 0, "negative dimension in {}", shape_str(shape_));
}

Tensor Tensor::cpu_uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t(nullptr, dtype, std::move(shape));
  const int64_t bytes = t.nbytes();
  const size_t alloc = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = alloc ? std::aligned_alloc(64, alloc) : nullptr;
  LOOM_CHECK(alloc == 0 || p, "out of memory allocating {} bytes", bytes);
  advise_huge_pages(p, alloc);  // weights and the KV cache stream faster
  t.data_ = p;
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return t;
}

Tensor Tensor::cpu(DType dtype, std::vector<int64_t> shape) {
  Tensor t = cpu_uninitialized(dtype, std::move(shape));
  if (t.data_) std::memset(t.data_, 0, static_cast<size_t>((t.nbytes() + 63) / 64 * 64));
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n = checked_mul(n, d);
  return n;
}

int64_t Tensor::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape_.size(); ++i) n = checked_mul(n, shape_[i]);
  return n;
}

int64_t Tensor::row_stride_bytes() const { return row_bytes(dtype_, cols()); }

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  Tensor t(data_, dtype_, std::move(shape), device_, owner_);
  LOOM_CHECK(t.numel() == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(t.shape_));
  if (is_quantized(dtype_))
    LOOM_CHECK(t.cols() % dtype_info(dtype_).block_elems == 0, "reshape splits quantised blocks");
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t count) const {
  LOOM_CHECK(ndim() >= 1 && begin >= 0 && count >= 0 && begin + count <= shape_[0],
             "row slice [{}, {}) out of range for {}", begin, begin + count, shape_str(shape_));
  const int64_t group = dtype_info(dtype_).row_group;
  LOOM_CHECK(begin % group == 0, "a {} tensor's row slices start at a multiple of {}, not {}",
             dtype_name(dtype_), group, begin);
  int64_t inner = 1;
  for (size_t i = 1; i < shape_.size(); ++i) inner = checked_mul(inner, shape_[i]);
  const int64_t row_elems = inner;
  const int64_t bytes_per_row = ndim() == 1 ? row_bytes(dtype_, 1) : row_bytes(dtype_, row_elems);
  auto shape = shape_;
  shape[0] = count;
  return Tensor(static_cast<char*>(data_) + begin * bytes_per_row, dtype_, std::move(shape), device_,
                owner_);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace loom
