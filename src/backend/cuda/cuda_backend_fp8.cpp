// CudaBackend's FP8 parts: linear layers with FP8 E4M3 weights (prepare_linear
// uploads them with their scales, or quantises plain weights per row on the
// GPU; linear runs Fp8Gemm; stack_linear fuses FP8 projections) and the KV
// cache check the cache ops share (bf16, or FP8 E4M3 with per-head scales).
// On the GPU a weight's scales are per row (a per-tensor scale is repeated
// for every row) or per 128x128 block, rows of block scales padded to a
// multiple of 4 (16 bytes), the layout cuBLASLt's block scaling reads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "core/logging.h"

namespace loom::cuda {
namespace {

constexpr int64_t kBlock = 128;
constexpr int64_t kQuantizeChunkBytes = int64_t{64} << 20;  // staging of --quantization fp8 uploads

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// One f32 value of a device tensor (a static input scale), read at load time.
float device_f32(Backend& be, const Tensor& t) {
  float v = 0;
  be.copy_to_host(&v, t, 4);
  return v;
}

}  // namespace

bool CudaBackend::check_cache(const KvLayerCache& cache) {
  LOOM_CHECK(cache.k.ndim() == 4 && cache.k.shape() == cache.v.shape(),
             "kv cache K {} and V {} must be [blocks, block_size, kv_heads, head_dim]",
             shape_str(cache.k.shape()), shape_str(cache.v.shape()));
  const bool fp8 = cache.k.dtype() == DType::F8_E4M3;
  check_cuda_tensor(cache.k, fp8 ? DType::F8_E4M3 : DType::BF16, "kv cache K");
  check_cuda_tensor(cache.v, fp8 ? DType::F8_E4M3 : DType::BF16, "kv cache V");
  if (fp8) {
    check_cuda_tensor(cache.k_scale, DType::F32, "FP8 kv cache K scales");
    check_cuda_tensor(cache.v_scale, DType::F32, "FP8 kv cache V scales");
    LOOM_CHECK(cache.k_scale.numel() == cache.k.dim(2) && cache.v_scale.numel() == cache.k.dim(2),
               "FP8 kv cache scales must have one value per KV head ({}), got {} and {}",
               cache.k.dim(2), cache.k_scale.numel(), cache.v_scale.numel());
  }
  return fp8;
}

void CudaBackend::check_fp8_supported(const char* what) const {
  LOOM_CHECK(props_.major * 10 + props_.minor >= 89,
             "{} need FP8 tensor cores (compute capability 8.9 or newer); GPU {} ({}) is {}.{}",
             what, device_, props_.name, props_.major, props_.minor);
}

LinearWeight CudaBackend::prepare_linear(const LinearWeight& host) {
  if (!host.fp8() && !host.quantize) {
    LinearWeight out;
    out.weight = prepare_weight(host.weight);
    return out;
  }
  LOOM_CHECK(host.weight.ndim() == 2 && host.weight.device() == Device::Cpu,
             "prepare_linear needs a 2-D host weight, got {}", shape_str(host.weight.shape()));
  const int64_t n = host.rows(), k = host.cols();
  if (k % 16 != 0) {  // cuBLASLt and the FP8 kernel read 16-byte pieces of rows
    LOOM_LOG_WARN("an FP8 linear weight [{}, {}]: k is not a multiple of 16, so it runs in bf16", n,
                  k);
    LinearWeight plain = host;
    plain.quantize = false;
    return Backend::prepare_linear(plain);
  }
  check_fp8_supported("FP8 linear layers");
  if (!fp8_gemm_) fp8_gemm_ = std::make_unique<Fp8Gemm>(stream_);

  LinearWeight out;
  out.block_n = out.block_k = kBlock;
  if (host.quantize) {
    // Rows of the plain weight to the GPU in chunks, quantised there per row.
    const DType t = host.weight.dtype();
    LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
               "--quantization fp8 quantises f32, f16 or bf16 weights, got {}", dtype_name(t));
    out.weight = alloc(DType::F8_E4M3, {n, k});
    out.scale = alloc(DType::F32, {n});
    out.scale_kind = Fp8WeightScale::Channel;
    out.activation = Fp8Activation::DynamicToken;
    const int64_t row_bytes = host.weight.row_stride_bytes();
    const int64_t rows_per_chunk = std::max<int64_t>(1, kQuantizeChunkBytes / row_bytes);
    DeviceBuffer staging;
    void* dev =
        staging.ensure(static_cast<size_t>(std::min(n, rows_per_chunk) * row_bytes), stream_);
    const auto* src = static_cast<const uint8_t*>(host.weight.data());
    for (int64_t r0 = 0; r0 < n; r0 += rows_per_chunk) {
      const int64_t rows = std::min(rows_per_chunk, n - r0);
      // Returns once the bytes are staged (stream-ordered after the last
      // chunk's quantisation, which read `dev`).
      weight_stager().copy(dev, src + r0 * row_bytes, static_cast<size_t>(rows * row_bytes),
                           stream_);
      quantize_fp8_weight_rows(t, dev, rows, k, out.weight.data_as<uint8_t>() + r0 * k,
                               out.scale.data_as<float>() + r0, stream_);
      check_launch();
    }
    synchronize();  // before `staging` is freed
    return out;
  }

  check_fp8_linear(host, "prepare_linear");
  out.weight = prepare_weight(host.weight);  // the FP8 bytes as they are
  out.activation = host.activation;
  const float* s = host.scale.data_as<const float>();
  std::vector<float> scale;
  if (host.scale_kind == Fp8WeightScale::Block) {
    const int64_t nb = ceil_div(n, kBlock), kb = ceil_div(k, kBlock), ld = ceil_div(kb, 4) * 4;
    scale.assign(static_cast<size_t>(nb * ld), 0.0f);
    for (int64_t i = 0; i < nb; ++i)
      std::copy_n(s + i * host.scale_row_stride(), kb, scale.begin() + i * ld);
    out.scale_kind = Fp8WeightScale::Block;
    out.scale_ld = ld;
    out.scale = alloc(DType::F32, {nb, ld});
  } else {
    scale.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      scale[static_cast<size_t>(i)] = host.scale_kind == Fp8WeightScale::Tensor ? s[0] : s[i];
    out.scale_kind = Fp8WeightScale::Channel;
    out.scale = alloc(DType::F32, {n});
  }
  copy_from_host(out.scale, scale.data(), scale.size() * 4);
  if (host.activation == Fp8Activation::Static) {
    out.input_scale = alloc(DType::F32, {1});
    copy_from_host(out.input_scale, host.input_scale.data(), 4);
  }
  return out;
}

void CudaBackend::linear_many(const Tensor& x, const std::vector<LinearJob>& jobs) {
  struct Done {  // the prequantised rows end with this call, thrown or not
    CudaBackend& be;
    ~Done() {
      be.in_linear_many_ = false;
      if (be.fp8_gemm_) be.fp8_gemm_->prequantized_done();
    }
  } done{*this};
  in_linear_many_ = true;
  Backend::linear_many(x, jobs);
}

void CudaBackend::linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out) {
  struct Done {
    CudaBackend& be;
    ~Done() {
      if (!be.in_linear_many_ && be.fp8_gemm_) be.fp8_gemm_->prequantized_done();
    }
  } done{*this};
  if (!w.fp8()) return matmul(x, w.weight, bias, out);
  check_cuda_tensor(w.weight, DType::F8_E4M3, "linear weight");
  LOOM_CHECK(w.weight.ndim() == 2, "linear weight must be 2-D [N, K], got {}",
             shape_str(w.weight.shape()));
  const int64_t n = w.rows(), k = w.cols(), m = x.rows();
  check_cuda_tensor(x, DType::BF16, "linear x");
  check_cuda_tensor(out, DType::BF16, "linear out");
  LOOM_CHECK(x.cols() == k, "linear x {} does not match weight {}", shape_str(x.shape()),
             shape_str(w.weight.shape()));
  LOOM_CHECK(out.rows() == m && out.cols() == n, "linear out {} must be [{}, {}]",
             shape_str(out.shape()), m, n);
  LOOM_CHECK(fp8_gemm_ && w.scale.device() == Device::Cuda,
             "an FP8 linear weight not prepared by this backend");
  LOOM_CHECK(aligned16(x.data()) && aligned16(w.weight.data()) && k % 16 == 0,
             "FP8 linear: x and the weight must be 16-byte aligned with k a multiple of 16");
  const void* bias_dev = nullptr;
  if (bias) {
    LOOM_CHECK(bias->numel() == n, "linear bias must have {} values, got {}", n, bias->numel());
    bias_dev = bias_as_bf16(*bias);
  }
  fp8_gemm_->run(x.data(), m, fp8_view(w), bias_dev, out.data());
  check_launch();
}

uint64_t CudaBackend::fp8_prequantized() const {
  return fp8_gemm_ ? fp8_gemm_->stats().prequantized : 0;
}

Fp8WeightView CudaBackend::fp8_view(const LinearWeight& w) const {
  const bool block = w.scale_kind == Fp8WeightScale::Block;
  LOOM_CHECK(block || w.scale_kind == Fp8WeightScale::Channel,
             "FP8 linear: unprepared per-tensor scales");
  Fp8WeightView v;
  v.w = w.weight.data_as<const uint8_t>();
  v.n = w.rows();
  v.k = w.cols();
  v.scale = w.scale.data_as<const float>();
  v.scale_ld = w.scale_ld;
  v.block = block;
  v.activation = w.activation;
  v.input_scale =
      w.activation == Fp8Activation::Static ? w.input_scale.data_as<const float>() : nullptr;
  LOOM_CHECK(w.activation != Fp8Activation::Static || v.input_scale,
             "FP8 linear: a static layer has no input scale");
  return v;
}

bool CudaBackend::fp8_rows_for(const Tensor& out, const LinearWeight* next, Fp8RowsOut& rows) {
  if (!fp8_gemm_) return false;
  fp8_gemm_->prequantized_done();
  if (!next || !next->fp8() || next->weight.device() != Device::Cuda || next->weight.ndim() != 2 ||
      next->cols() != out.cols() || out.dtype() != DType::BF16 || !aligned16(out.data()) ||
      out.cols() % 16 != 0)
    return false;
  std::optional<Fp8RowsOut> r = fp8_gemm_->prequantize(out.data(), out.rows(), fp8_view(*next));
  if (!r) return false;
  rows = *r;
  return true;
}

std::optional<LinearWeight> CudaBackend::stack_linear(
    const std::vector<const LinearWeight*>& parts) {
  LOOM_CHECK(!parts.empty(), "stack_linear of nothing");
  const bool any_fp8 =
      std::any_of(parts.begin(), parts.end(), [](const LinearWeight* p) { return p->fp8(); });
  if (!any_fp8) return Backend::stack_linear(parts);
  const LinearWeight& first = *parts[0];
  const bool block = first.scale_kind == Fp8WeightScale::Block;
  int64_t rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearWeight& p = *parts[i];
    if (!p.fp8() || p.weight.device() != Device::Cuda || p.cols() != first.cols() ||
        p.scale_kind != first.scale_kind || p.activation != first.activation ||
        p.scale_ld != first.scale_ld)
      return std::nullopt;
    // Block scales stack when every part but the last fills whole 128-row blocks.
    if (block && i + 1 < parts.size() && p.rows() % kBlock != 0) return std::nullopt;
    if (p.activation == Fp8Activation::Static &&
        device_f32(*this, p.input_scale) != device_f32(*this, first.input_scale))
      return std::nullopt;
    rows += p.rows();
  }
  LinearWeight out = first;
  out.weight = alloc(DType::F8_E4M3, {rows, first.cols()});
  out.scale = block ? alloc(DType::F32, {ceil_div(rows, kBlock), first.scale_ld})
                    : alloc(DType::F32, {rows});
  int64_t at = 0, scale_at = 0;
  for (const LinearWeight* p : parts) {
    Tensor w = out.weight.slice_rows(at, p->rows());
    copy(w, p->weight);
    Tensor s = out.scale.slice_rows(scale_at, p->scale.dim(0));
    copy(s, p->scale);
    at += p->rows();
    scale_at += p->scale.dim(0);
  }
  return out;
}

}  // namespace loom::cuda
