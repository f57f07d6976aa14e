// upload_weight (see weight_upload.h). Weights already in their device type
// are copied as they are; other float weights travel in chunks of at most
// kChunkElems values: raw bytes to a device staging buffer, then a conversion
// kernel into place. Quantised rows are dequantised on the host
// (backend/quant's dequantize_row) into an f32 chunk first.
#include "backend/cuda/weight_upload.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/weight_stager.h"
#include "backend/quant/quant.h"

namespace loom::cuda {
namespace {

constexpr int64_t kChunkElems = int64_t{1} << 24;  // 16M values: 64 MB of f32 staging at most

}  // namespace

std::shared_ptr<void> device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes) {
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      LOOM_THROW("CUDA out of memory allocating {} bytes ({})", bytes, cudaGetErrorString(err));
    }
  }
  return std::shared_ptr<void>(p, [](void* q) {
    if (q) cudaFree(q);
  });
}

Tensor upload_weight(const Tensor& host, cudaStream_t stream, WeightStager* stager) {
  LOOM_CHECK(host.device() == Device::Cpu, "upload_weight needs a host tensor");
  // Host bytes to the device: through the stager's pinned buffers, or a
  // pageable copy that returns once the bytes are staged by the driver.
  const auto to_device = [&](void* dst, const void* src, size_t bytes) {
    if (stager)
      stager->copy(dst, src, bytes, stream);
    else
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  };
  const auto finish = [&] {
    if (!stager) LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  const DType src = host.dtype();
  const bool is_float = src == DType::F32 || src == DType::F16 || src == DType::BF16;
  const int64_t n = host.numel();
  if (!is_float && !is_quantized(src)) {  // integers: as they are
    const auto bytes = static_cast<size_t>(host.nbytes());
    auto mem = device_alloc(bytes);
    if (bytes) to_device(mem.get(), host.data(), bytes);
    finish();
    return Tensor(mem.get(), src, host.shape(), Device::Cuda, mem);
  }
  const DType dst = host.ndim() >= 2 ? DType::BF16 : DType::F32;
  const int64_t dst_elem = dst == DType::BF16 ? 2 : 4;
  auto mem = device_alloc(static_cast<size_t>(n * dst_elem));
  Tensor out(mem.get(), dst, host.shape(), Device::Cuda, mem);
  if (n == 0) return out;

  if (is_float && src == dst) {
    to_device(mem.get(), host.data(), static_cast<size_t>(host.nbytes()));
    finish();
    return out;
  }
  // Chunks are whole rows for quantised types (dequantize_row works per row).
  const int64_t cols = host.cols(), rows = host.rows();
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(cols, 1));
  const DType staged = is_float ? src : DType::F32;
  const int64_t staged_elem = dtype_info(staged).block_bytes;
  const int64_t chunk_elems = std::min(rows, rows_per_chunk) * cols;
  void* staging = nullptr;
  LOOM_CUDA_CHECK(
      cudaMallocAsync(&staging, static_cast<size_t>(chunk_elems * staged_elem), stream));
  std::vector<float> deq;
  const auto* src_bytes = static_cast<const uint8_t*>(host.data());
  const int64_t src_row_bytes = host.row_stride_bytes();
  try {
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const int64_t nr = std::min(rows_per_chunk, rows - r0);
      const int64_t ne = nr * cols;
      const void* chunk = src_bytes + r0 * src_row_bytes;
      if (!is_float) {
        deq.resize(static_cast<size_t>(ne));
        for (int64_t r = 0; r < nr; ++r)
          quant::dequantize_row(src, src_bytes + (r0 + r) * src_row_bytes, deq.data() + r * cols,
                                cols);
        chunk = deq.data();
      }
      // Returns once the source was staged, so the host buffer may be
      // refilled for the next chunk.
      to_device(staging, chunk, static_cast<size_t>(ne * staged_elem));
      convert(staged, staging, dst, static_cast<uint8_t*>(mem.get()) + r0 * cols * dst_elem, ne,
              stream);
      LOOM_CUDA_CHECK(cudaGetLastError());
    }
  } catch (...) {
    cudaFreeAsync(staging, stream);
    cudaStreamSynchronize(stream);
    throw;
  }
  LOOM_CUDA_CHECK(cudaFreeAsync(staging, stream));
  finish();
  return out;
}

}  // namespace loom::cuda
