// CudaBackend's data movement: device-to-device copies (KV blocks), KV cache
// writes (kernels/kv/), row gathers, and a step's token ids kept on the device
// (resolve_token_ids, download_tokens through pooled pinned buffers).
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

void CudaBackend::copy(Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.dtype() == src.dtype() && dst.nbytes() == src.nbytes(), "copy: {} {} into {} {}",
             dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()),
             shape_str(dst.shape()));
  if (src.device() != Device::Cuda || dst.device() != Device::Cuda) return Backend::copy(dst, src);
  if (src.nbytes() == 0) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(src.nbytes()),
                                  cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache,
                           const AttentionMetadata& meta) {
  const bool fp8 = check_cache(cache);
  check_cuda_tensor(k, DType::BF16, "write_kv k");
  check_cuda_tensor(v, DType::BF16, "write_kv v");
  const int64_t row = cache.k.dim(2) * cache.k.dim(3);
  const int64_t slots = cache.k.dim(0) * cache.k.dim(1);
  const int64_t t = k.ndim() >= 1 ? k.dim(0) : 0;
  LOOM_CHECK(k.numel() == t * row && v.numel() == k.numel() && v.dim(0) == t,
             "write_kv k {} and v {} must be [T, {}, {}]", shape_str(k.shape()),
             shape_str(v.shape()), cache.k.dim(2), cache.k.dim(3));
  LOOM_CHECK(meta.slot_mapping.size() == static_cast<size_t>(t),
             "slot_mapping must have {} entries", t);
  for (int64_t i = 0; i < t; ++i)
    LOOM_CHECK(meta.slot_mapping[i] < slots, "slot {} out of range [0, {})", meta.slot_mapping[i],
               slots);
  if (t == 0) return;
  const cuda::DeviceStepMetadata& dm = metadata_.get(meta, t, stream_);
  if (fp8) {
    LOOM_CHECK(cache.k.dim(3) % 8 == 0, "an FP8 kv cache needs head_dim a multiple of 8, got {}",
               cache.k.dim(3));
    cuda::write_kv_fp8(k.data(), v.data(), dm.slot_mapping, t, row, cache.k.dim(3),
                       cache.k_scale.data_as<float>(), cache.v_scale.data_as<float>(),
                       cache.k.data(), cache.v.data(), stream_);
  } else {
    cuda::write_kv_bf16(k.data(), v.data(), dm.slot_mapping, t, row, cache.k.data(), cache.v.data(),
                        stream_);
  }
  check_launch();
}

void CudaBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) {
  LOOM_CHECK(x.device() == Device::Cuda && out.device() == Device::Cuda,
             "gather_rows tensors must be on the GPU");
  const int64_t n = static_cast<int64_t>(rows.size());
  LOOM_CHECK(out.dtype() == x.dtype() && out.rows() == n && out.cols() == x.cols(),
             "gather_rows out {} must be [{}, {}] of {}", shape_str(out.shape()), n, x.cols(),
             dtype_name(x.dtype()));
  LOOM_CHECK(x.data() != out.data() || n == 0, "gather_rows cannot run in place");
  const int64_t src_rows = x.rows();
  for (int64_t i = 0; i < n; ++i)
    LOOM_CHECK(rows[i] >= 0 && rows[i] < src_rows, "gather row {} out of range [0, {})", rows[i],
               src_rows);
  if (n == 0) return;
  check_not_capturing("gather_rows");
  void* idx = gather_idx_.ensure(rows.size() * 4, stream_);
  uploader_.upload(idx, rows.data(), rows.size() * 4, stream_);
  cuda::gather_rows(x.data(), static_cast<const int32_t*>(idx), n, x.row_stride_bytes(), out.data(),
                    stream_);
  check_launch();
}

void CudaBackend::resolve_token_ids(Tensor& ids, const Tensor& src) {
  check_cuda_tensor(ids, DType::I32, "resolve_token_ids ids");
  check_cuda_tensor(src, DType::I32, "resolve_token_ids source");
  check_not_capturing("resolve_token_ids");
  cuda::resolve_token_ids(static_cast<int32_t*>(ids.data()), ids.numel(),
                          static_cast<const int32_t*>(src.data()), stream_);
  check_launch();
}

// A pinned host buffer per download in flight (pooled), filled by an
// async copy on the stream; wait() syncs its event only.
class CudaBackend::Download final : public TokenDownload {
 public:
  Download(CudaBackend& be, size_t slot, int64_t n) : be_(be), slot_(slot), n_(n) {}
  ~Download() override {
    if (!done_) cudaEventSynchronize(be_.download_slots_[slot_].done);
    be_.download_slots_[slot_].busy = false;
  }
  const std::vector<int32_t>& wait() override {
    if (!done_) {
      auto& s = be_.download_slots_[slot_];
      LOOM_CUDA_CHECK(cudaEventSynchronize(s.done));
      ids_.assign(s.host, s.host + n_);
      done_ = true;
    }
    return ids_;
  }

 private:
  CudaBackend& be_;
  size_t slot_;
  int64_t n_;
  bool done_ = false;
  std::vector<int32_t> ids_;
};

std::unique_ptr<Backend::TokenDownload> CudaBackend::download_tokens(const Tensor& ids, int64_t n) {
  check_cuda_tensor(ids, DType::I32, "download_tokens ids");
  LOOM_CHECK(n >= 0 && n <= ids.numel(), "download_tokens: {} of {} ids", n, ids.numel());
  check_not_capturing("download_tokens");
  size_t slot = 0;
  while (slot < download_slots_.size() && download_slots_[slot].busy) ++slot;
  if (slot == download_slots_.size()) download_slots_.emplace_back();
  DownloadSlot& s = download_slots_[slot];
  if (!s.done) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  if (static_cast<size_t>(n) > s.capacity) {
    if (s.host) LOOM_CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr;
    s.capacity = 0;
    const size_t want = std::max<size_t>(1024, static_cast<size_t>(n) * 2);
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocHost(&p, want * sizeof(int32_t)));
    s.host = static_cast<int32_t*>(p);
    s.capacity = want;
  }
  if (n > 0)
    LOOM_CUDA_CHECK(cudaMemcpyAsync(s.host, ids.data(), static_cast<size_t>(n) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaEventRecord(s.done, stream_));
  s.busy = true;
  return std::make_unique<Download>(*this, slot, n);
}

}  // namespace loom::cuda
