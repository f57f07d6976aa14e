// LinearWeight checks and the host FP8 references (linear.h).
#include "backend/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"
#include "core/half.h"

namespace loom {
namespace {

float host_f32(const Tensor& t, int64_t i) {
  LOOM_CHECK(t.device() == Device::Cpu && t.dtype() == DType::F32, "expected a host f32 tensor");
  return t.data_as<const float>()[i];
}

// Row r of a plain host matrix as floats.
void row_as_f32(const Tensor& w, int64_t r, float* out) {
  const int64_t k = w.cols();
  const auto* base = static_cast<const uint8_t*>(w.data()) + r * w.row_stride_bytes();
  switch (w.dtype()) {
    case DType::F32:
      std::memcpy(out, base, static_cast<size_t>(k) * 4);
      break;
    case DType::BF16:
      for (int64_t i = 0; i < k; ++i)
        out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(base)[i]);
      break;
    case DType::F16:
      for (int64_t i = 0; i < k; ++i)
        out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(base)[i]);
      break;
    default:
      LOOM_THROW("FP8 quantisation of a {} matrix: expected f32, f16 or bf16",
                 dtype_name(w.dtype()));
  }
}

}  // namespace

void check_fp8_linear(const LinearWeight& w, const char* name) {
  LOOM_CHECK(w.fp8(), "'{}': not an FP8 weight ({})", name, dtype_name(w.weight.dtype()));
  if (w.weight.ndim() != 2)
    LOOM_THROW("'{}': FP8 weight must be 2-D, got {}", name, shape_str(w.weight.shape()));
  const int64_t n = w.rows(), k = w.cols();
  if (w.scale.dtype() != DType::F32 || !w.scale.defined())
    LOOM_THROW("'{}': FP8 weight scale must be f32, got {}", name, dtype_name(w.scale.dtype()));
  switch (w.scale_kind) {
    case Fp8WeightScale::Tensor:
      if (w.scale.numel() != 1)
        LOOM_THROW("'{}': per-tensor scale has {} values", name, w.scale.numel());
      break;
    case Fp8WeightScale::Channel:
      if (w.scale.numel() != n)
        LOOM_THROW("'{}': per-channel scale has {} values for {} rows", name, w.scale.numel(), n);
      break;
    case Fp8WeightScale::Block: {
      if (w.block_n != 128 || w.block_k != 128)
        LOOM_THROW("'{}': FP8 block {}x{} is not supported (128x128)", name, w.block_n, w.block_k);
      const int64_t nb = (n + w.block_n - 1) / w.block_n;
      if (w.scale_row_stride() < w.k_blocks() || w.scale.numel() != nb * w.scale_row_stride())
        LOOM_THROW("'{}': block scale {} does not fit a [{}, {}] weight in {}x{} blocks", name,
                   shape_str(w.scale.shape()), n, k, w.block_n, w.block_k);
      break;
    }
  }
  if (w.activation == Fp8Activation::Static) {
    if (w.input_scale.dtype() != DType::F32 || w.input_scale.numel() != 1)
      LOOM_THROW("'{}': static FP8 activations need one f32 input_scale", name);
    if (w.input_scale.device() == Device::Cpu) {
      const float s = host_f32(w.input_scale, 0);
      if (!(std::isfinite(s) && s > 0))
        LOOM_THROW("'{}': input_scale {} must be finite and > 0", name, s);
    }
  }
  if (w.activation == Fp8Activation::DynamicGroup && w.block_k != 128)
    LOOM_THROW("'{}': FP8 activation groups of {} columns are not supported (128)", name,
               w.block_k);
}

float fp8_weight_scale(const LinearWeight& w, int64_t n, int64_t k) {
  switch (w.scale_kind) {
    case Fp8WeightScale::Tensor:
      return host_f32(w.scale, 0);
    case Fp8WeightScale::Channel:
      return host_f32(w.scale, n);
    case Fp8WeightScale::Block:
      return host_f32(w.scale, (n / w.block_n) * w.scale_row_stride() + k / w.block_k);
  }
  return 0;
}

Tensor dequantize_fp8_linear(const LinearWeight& w) {
  check_fp8_linear(w, "dequantize_fp8_linear");
  LOOM_CHECK(w.weight.device() == Device::Cpu, "dequantize_fp8_linear needs host tensors");
  const int64_t n = w.rows(), k = w.cols();
  Tensor out = Tensor::cpu(DType::F32, {n, k});
  const float* table = fp8_e4m3_table();
  const auto* q = w.weight.data_as<const uint8_t>();
  float* o = out.data_as<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) o[r * k + c] = table[q[r * k + c]] * fp8_weight_scale(w, r, c);
  return out;
}

LinearWeight quantize_fp8_per_channel(const Tensor& w) {
  LOOM_CHECK(w.device() == Device::Cpu && w.ndim() == 2,
             "quantize_fp8_per_channel needs a 2-D host matrix");
  const int64_t n = w.dim(0), k = w.dim(1);
  LinearWeight out;
  out.weight = Tensor::cpu(DType::F8_E4M3, {n, k});
  out.scale = Tensor::cpu(DType::F32, {n});
  out.scale_kind = Fp8WeightScale::Channel;
  out.activation = Fp8Activation::DynamicToken;
  std::vector<float> row(static_cast<size_t>(k));
  auto* q = out.weight.data_as<uint8_t>();
  float* scale = out.scale.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    row_as_f32(w, r, row.data());
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    scale[r] = fp8_scale_for_amax(amax);
    const float inv = 1.0f / scale[r];
    for (int64_t c = 0; c < k; ++c)
      q[r * k + c] = f32_to_fp8_e4m3(row[static_cast<size_t>(c)] * inv);
  }
  return out;
}

Fp8Activations quantize_fp8_activations(const float* x, int64_t m, int64_t k,
                                        const LinearWeight& w) {
  Fp8Activations a;
  a.q.resize(static_cast<size_t>(m * k));
  auto quantize = [&](int64_t row, int64_t c0, int64_t c1, float scale) {
    const float inv = 1.0f / scale;
    for (int64_t c = c0; c < c1; ++c)
      a.q[static_cast<size_t>(row * k + c)] = f32_to_fp8_e4m3(x[row * k + c] * inv);
  };
  auto amax = [&](int64_t row, int64_t c0, int64_t c1) {
    float v = 0;
    for (int64_t c = c0; c < c1; ++c) v = std::max(v, std::fabs(x[row * k + c]));
    return v;
  };
  switch (w.activation) {
    case Fp8Activation::Static: {
      LOOM_CHECK(w.input_scale.device() == Device::Cpu,
                 "quantize_fp8_activations needs a host input_scale");
      a.scale = {host_f32(w.input_scale, 0)};
      for (int64_t r = 0; r < m; ++r) quantize(r, 0, k, a.scale[0]);
      break;
    }
    case Fp8Activation::DynamicToken:
      for (int64_t r = 0; r < m; ++r) {
        a.scale.push_back(fp8_scale_for_amax(amax(r, 0, k)));
        quantize(r, 0, k, a.scale.back());
      }
      break;
    case Fp8Activation::DynamicGroup:
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c0 = 0; c0 < k; c0 += w.block_k) {
          const int64_t c1 = std::min(k, c0 + w.block_k);
          a.scale.push_back(fp8_scale_for_amax(amax(r, c0, c1)));
          quantize(r, c0, c1, a.scale.back());
        }
      break;
  }
  return a;
}

float fp8_activation_scale(const Fp8Activations& a, const LinearWeight& w, int64_t row,
                           int64_t col) {
  switch (w.activation) {
    case Fp8Activation::Static:
      return a.scale[0];
    case Fp8Activation::DynamicToken:
      return a.scale[static_cast<size_t>(row)];
    case Fp8Activation::DynamicGroup: {
      const int64_t groups = (w.cols() + w.block_k - 1) / w.block_k;
      return a.scale[static_cast<size_t>(row * groups + col / w.block_k)];
    }
  }
  return 0;
}

}  // namespace loom
