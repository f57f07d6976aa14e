// Tensor: a typed, contiguous, row-major view of memory on one device, with
// an optional owner that keeps the memory alive. Copying a Tensor copies the
// view, not the data. Shapes list the outermost dimension first (as torch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace loom {

enum class Device : uint8_t { Cpu, Cuda };

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, std::vector<int64_t> shape, Device device = Device::Cpu,
         std::shared_ptr<void> owner = nullptr);

  // A new zero-initialised CPU tensor that owns its memory (64-byte aligned).
  static Tensor cpu(DType dtype, std::vector<int64_t> shape);
  // The same, its bytes left as they come: for a buffer the caller fills
  // whole right away (its pages are first touched by whoever writes them).
  static Tensor cpu_uninitialized(DType dtype, std::vector<int64_t> shape);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const;
  int64_t rows() const;                 // product of all but the last dimension
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }
  int64_t row_stride_bytes() const;     // bytes of one row (quantised types too)
  int64_t nbytes() const { return rows() * row_stride_bytes(); }

  void* data() const { return data_; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data_); }

  // Same memory, new shape with the same number of elements.
  Tensor reshape(std::vector<int64_t> shape) const;
  // Rows [begin, begin + count) of the first dimension.
  Tensor slice_rows(int64_t begin, int64_t count) const;

  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  Device device_ = Device::Cpu;
  std::shared_ptr<void> owner_;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace loom
