// CudaBackend's token choice on the GPU: argmax_rows and sample_rows (to the
// host or into a device id buffer), with specs and logit edits checked and
// uploaded in one pinned copy (kernels/sampling/).
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

void CudaBackend::apply_token_bitmask(Tensor& logits, const std::vector<int32_t>& rows,
                                      const std::vector<uint32_t>& words) {
  LOOM_CHECK(logits.device() == Device::Cuda, "apply_token_bitmask logits must be on the GPU");
  const DType t = logits.dtype();
  LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
             "apply_token_bitmask logits must be bf16, f16 or f32, got {}", dtype_name(t));
  LOOM_CHECK(logits.ndim() == 2 && logits.cols() > 0 && logits.rows() < (int64_t{1} << 31),
             "apply_token_bitmask: logits {} must be [rows, vocab]", shape_str(logits.shape()));
  const int64_t vocab = logits.cols();
  const auto per_row = static_cast<size_t>((vocab + 31) / 32);
  LOOM_CHECK(words.size() == rows.size() * per_row, "apply_token_bitmask: {} mask words for {} rows of {} tokens",
             words.size(), rows.size(), vocab);
  for (int32_t r : rows)
    LOOM_CHECK(r >= 0 && r < logits.rows(), "apply_token_bitmask: row {} outside [0, {})", r, logits.rows());
  if (rows.empty()) return;
  check_not_capturing("apply_token_bitmask");
  // Row indices, then the words, in one upload.
  const size_t n = rows.size() + words.size();
  void* dev = token_mask_.ensure(n * sizeof(uint32_t), stream_);
  Tensor dst(dev, DType::I32, {static_cast<int64_t>(n)}, Device::Cuda);
  mask_staging_.resize(n);
  std::copy(rows.begin(), rows.end(), reinterpret_cast<int32_t*>(mask_staging_.data()));
  std::copy(words.begin(), words.end(), mask_staging_.begin() + static_cast<std::ptrdiff_t>(rows.size()));
  copy_from_host(dst, mask_staging_.data(), n * sizeof(uint32_t));
  const auto* d_rows = static_cast<const int32_t*>(dev);
  const auto* d_words = static_cast<const uint32_t*>(dev) + rows.size();
  cuda::apply_token_bitmask(t, logits.data(), logits.row_stride_bytes(), vocab, d_rows,
                            static_cast<int32_t>(rows.size()), d_words, stream_);
  check_launch();
}

void CudaBackend::argmax_rows(const Tensor& logits, std::vector<int32_t>& out) {
  LOOM_CHECK(logits.device() == Device::Cuda, "argmax_rows logits must be on the GPU");
  const DType t = logits.dtype();
  LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
             "argmax_rows logits must be bf16, f16 or f32, got {}", dtype_name(t));
  LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX,
             "argmax_rows: logits {} must be [rows, vocab] with 0 < vocab < 2^31",
             shape_str(logits.shape()));
  const int64_t rows = logits.rows();
  LOOM_CHECK(rows < (int64_t{1} << 31), "argmax_rows: {} rows", rows);
  out.assign(static_cast<size_t>(rows), 0);
  if (rows == 0) return;
  LOOM_CHECK(logits.defined(), "argmax_rows logits have no memory");
  check_not_capturing("argmax_rows");
  const size_t bytes = static_cast<size_t>(rows) * sizeof(int32_t);
  auto* ids = static_cast<int32_t*>(argmax_ids_.ensure(bytes, stream_));
  cuda::argmax_rows(t, logits.data(), rows, logits.cols(), ids, stream_);
  check_launch();
  LOOM_CUDA_CHECK(cudaMemcpyAsync(out.data(), ids, bytes, cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::argmax_rows_to(const Tensor& logits, Tensor& ids) {
  LOOM_CHECK(logits.device() == Device::Cuda, "argmax_rows_to logits must be on the GPU");
  const DType t = logits.dtype();
  LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
             "argmax_rows_to logits must be bf16, f16 or f32, got {}", dtype_name(t));
  LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX &&
                 logits.rows() < (int64_t{1} << 31),
             "argmax_rows_to: logits {} must be [rows, vocab]", shape_str(logits.shape()));
  check_cuda_tensor(ids, DType::I32, "argmax_rows_to ids");
  LOOM_CHECK(ids.numel() >= logits.rows(), "argmax_rows_to: {} ids for {} rows", ids.numel(),
             logits.rows());
  if (logits.rows() == 0) return;
  check_not_capturing("argmax_rows_to");
  cuda::argmax_rows(t, logits.data(), logits.rows(), logits.cols(),
                    static_cast<int32_t*>(ids.data()), stream_);
  check_launch();
}

bool CudaBackend::sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                              const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) {
  out.assign(specs.size(), 0);
  const int32_t* ids = launch_sample_rows(logits, specs, edits, nullptr);
  if (specs.empty()) return true;
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), ids, specs.size() * 4, cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return true;
}

bool CudaBackend::sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                                 const std::vector<LogitEdit>& edits, Tensor& ids) {
  check_cuda_tensor(ids, DType::I32, "sample_rows_to ids");
  LOOM_CHECK(ids.numel() >= logits.rows(), "sample_rows_to: {} ids for {} rows", ids.numel(),
             logits.rows());
  launch_sample_rows(logits, specs, edits, static_cast<int32_t*>(ids.data()));
  return true;
}

// Checks and converts the specs (see cuda::SampleRowSpec), uploads specs and
// edits in one pinned copy and launches the draws: into `by_row` at each
// spec's row, or (null) into the workspace by spec, returned.
const int32_t* CudaBackend::launch_sample_rows(const Tensor& logits,
                                               const std::vector<SampleSpec>& specs,
                                               const std::vector<LogitEdit>& edits,
                                               int32_t* by_row) {
  LOOM_CHECK(logits.device() == Device::Cuda, "sample_rows logits must be on the GPU");
  const DType t = logits.dtype();
  LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
             "sample_rows logits must be bf16, f16 or f32, got {}", dtype_name(t));
  constexpr int64_t kMaxVocab = int64_t{1} << 19;  // the kernel's packed histograms
  const int64_t vocab = logits.cols(), rows = logits.rows();
  LOOM_CHECK(logits.ndim() >= 1 && vocab > 0 && vocab <= kMaxVocab,
             "sample_rows: logits {} must be [rows, vocab] with 0 < vocab <= {}",
             shape_str(logits.shape()), kMaxVocab);
  LOOM_CHECK(specs.size() < (size_t{1} << 30) && edits.size() < (size_t{1} << 30),
             "sample_rows: {} specs, {} edits", specs.size(), edits.size());
  const size_t n = specs.size();
  if (n == 0) return nullptr;
  LOOM_CHECK(logits.defined(), "sample_rows logits have no memory");
  check_not_capturing("sample_rows");

  const size_t spec_bytes = n * sizeof(cuda::SampleRowSpec);
  sample_staging_.resize(spec_bytes + edits.size() * sizeof(cuda::SampleRowEdit));
  auto* ds = reinterpret_cast<cuda::SampleRowSpec*>(sample_staging_.data());
  auto* de = reinterpret_cast<cuda::SampleRowEdit*>(sample_staging_.data() + spec_bytes);
  for (size_t i = 0; i < edits.size(); ++i) {
    const LogitEdit& e = edits[i];
    LOOM_CHECK(e.token >= 0 && e.token < vocab, "sample_rows: edit of token {} outside [0, {})",
               e.token, vocab);
    de[i] = cuda::SampleRowEdit{e.token, e.rep, e.sub, e.add, e.ban ? 1 : 0};
  }
  if (sample_seen_.size() != static_cast<size_t>(vocab))
    sample_seen_.assign(static_cast<size_t>(vocab), 0);
  // floor(f * 2^64) for f in [0, 1), clamped.
  auto fixed64 = [](double f) -> uint64_t {
    if (!(f > 0)) return 0;
    if (f >= 1) return UINT64_MAX;
    return static_cast<uint64_t>(std::ldexp(f, 64));
  };
  int64_t num_values = 0;
  for (size_t i = 0; i < n; ++i) {
    const SampleSpec& sp = specs[i];
    LOOM_CHECK(sp.row >= 0 && sp.row < rows, "sample_rows: spec {} row {} outside [0, {})", i,
               sp.row, rows);
    LOOM_CHECK(sp.temperature > 0 && std::isfinite(sp.temperature),
               "sample_rows: spec {} temperature {} must be finite and > 0", i, sp.temperature);
    LOOM_CHECK(sp.edits_begin >= 0 && sp.edits_begin <= sp.edits_end &&
                   static_cast<size_t>(sp.edits_end) <= edits.size(),
               "sample_rows: spec {} edits [{}, {}) outside [0, {})", i, sp.edits_begin,
               sp.edits_end, edits.size());
    if (++sample_stamp_ == 0) {  // wrapped: forget every stamp
      std::fill(sample_seen_.begin(), sample_seen_.end(), 0);
      sample_stamp_ = 1;
    }
    for (int32_t e = sp.edits_begin; e < sp.edits_end; ++e) {
      uint32_t& seen = sample_seen_[static_cast<size_t>(edits[e].token)];
      LOOM_CHECK(seen != sample_stamp_, "sample_rows: spec {} edits token {} twice", i,
                 edits[e].token);
      seen = sample_stamp_;
    }
    cuda::SampleRowSpec& d = ds[i];
    d = cuda::SampleRowSpec{};
    d.uniform64 = fixed64(sp.uniform);
    d.top_p_on = sp.top_p < 1.0f ? 1 : 0;
    d.top_p64 = d.top_p_on ? fixed64(sp.top_p) : 0;
    d.row = sp.row;
    d.inv_temperature = 1.0f / sp.temperature;
    d.top_k = sp.top_k;
    d.min_p_on = sp.min_p > 0.0f ? 1 : 0;
    d.log_min_p = d.min_p_on ? std::log(sp.min_p) : 0.0f;
    d.edits_begin = sp.edits_begin;
    d.edits_end = sp.edits_end;
    d.values_begin = static_cast<int32_t>(num_values);
    d.out = by_row ? sp.row : static_cast<int32_t>(i);
    num_values += sp.edits_end - sp.edits_begin;
    LOOM_CHECK(num_values < (int64_t{1} << 31), "sample_rows: too many edits");
  }

  // Workspace: ids, then (with edits) bitmaps, bitmap prefixes and edited values.
  const int64_t words = cuda::sample_rows_bitmap_words(vocab);
  const size_t ids_bytes = (n * 4 + 255) / 256 * 256;
  const size_t map_bytes = num_values ? n * static_cast<size_t>(words) * 4 : 0;
  auto* ws = static_cast<unsigned char*>(
      sample_ws_.ensure(ids_bytes + 2 * map_bytes + static_cast<size_t>(num_values) * 4, stream_));
  auto* ids = reinterpret_cast<int32_t*>(ws);
  auto* bitmap = reinterpret_cast<uint32_t*>(ws + ids_bytes);
  auto* prefix = reinterpret_cast<uint32_t*>(ws + ids_bytes + map_bytes);
  auto* values = reinterpret_cast<float*>(ws + ids_bytes + 2 * map_bytes);
  if (map_bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(bitmap, 0, map_bytes, stream_));
  auto* in = static_cast<unsigned char*>(sample_in_.ensure(sample_staging_.size(), stream_));
  uploader_.upload(in, sample_staging_.data(), sample_staging_.size(), stream_);
  cuda::sample_rows(t, logits.data(), vocab, reinterpret_cast<const cuda::SampleRowSpec*>(in),
                    static_cast<int32_t>(n),
                    reinterpret_cast<const cuda::SampleRowEdit*>(in + spec_bytes), bitmap, prefix,
                    values, by_row ? by_row : ids, stream_);
  check_launch();
  return ids;
}

}  // namespace loom::cuda
