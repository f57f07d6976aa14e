// CudaBackend's per-token ops: embedding, RMS norms, residual add, rope, gated
// activations, softcap and the fused QKV split (kernels/embedding/, norm/,
// rope/, elementwise/). Host-side vectors (norm weights, rope tables) are
// uploaded through the backend's parameter buffers.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/quant/quant.h"

namespace loom::cuda {
namespace {

using bf16_t = __nv_bfloat16;

}  // namespace

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) {
  check_cuda_tensor(table, DType::BF16, "embedding table");
  LOOM_CHECK(table.ndim() == 2, "embedding table must be 2-D, got {}", shape_str(table.shape()));
  LOOM_CHECK(ids.dtype() == DType::I32 && ids.ndim() == 1, "embedding ids must be i32 [T]");
  const int64_t t = ids.dim(0), hidden = table.dim(1);
  check_cuda_tensor(out, DType::BF16, "embedding out");
  LOOM_CHECK(out.rows() == t && out.cols() == hidden, "embedding out {} must be [{}, {}]",
             shape_str(out.shape()), t, hidden);
  const auto* id = static_cast<const int32_t*>(device_view(ids, param_buf_[0]));
  cuda::embedding_bf16(table.data(), table.dim(0), hidden, id, t, scale, out.data(), stream_);
  check_launch();
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset,
                           Tensor& out, const LinearWeight* next_linear) {
  check_cuda_tensor(x, DType::BF16, "rms_norm x");
  check_cuda_tensor(out, DType::BF16, "rms_norm out");
  check_same_shape(x, out, "rms_norm out");
  DType wt;
  const void* wd = norm_weight(w, x.cols(), wt);
  run_norm(x.data(), nullptr, wd, wt, weight_offset, eps, out, next_linear);
}

void CudaBackend::add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                               float weight_offset, Tensor& out, const LinearWeight* next_linear) {
  check_cuda_tensor(x, DType::BF16, "add_rms_norm x");
  check_cuda_tensor(residual, DType::BF16, "add_rms_norm residual");
  check_cuda_tensor(out, DType::BF16, "add_rms_norm out");
  check_same_shape(x, residual, "add_rms_norm residual");
  check_same_shape(x, out, "add_rms_norm out");
  DType wt;
  const void* wd = norm_weight(w, x.cols(), wt);
  run_norm(x.data(), residual.data(), wd, wt, weight_offset, eps, out, next_linear);
}

void CudaBackend::run_norm(const void* x, void* residual, const void* w, DType w_type,
                           float weight_offset, float eps, Tensor& out,
                           const LinearWeight* next_linear) {
  cuda::Fp8RowsOut rows;
  const bool fp8 = fp8_rows_for(out, next_linear, rows);
  if (!cuda::rms_norm_bf16(x, residual, w, w_type, weight_offset, eps, out.data(), out.rows(),
                           out.cols(), stream_, fp8 ? &rows : nullptr)) {
    fp8_rows_for(out, nullptr, rows);  // the quantised rows are not written: not read either
    cuda::rms_norm_bf16(x, residual, w, w_type, weight_offset, eps, out.data(), out.rows(),
                        out.cols(), stream_);
  }
  check_launch();
}

// Norm weight as F32 or BF16 on the device.

const void* CudaBackend::norm_weight(const Tensor& w, int64_t h, DType& type) {
  LOOM_CHECK(w.numel() == h, "norm weight {} must have {} values", shape_str(w.shape()), h);
  const DType t = w.dtype();
  if (w.device() == Device::Cuda) {
    LOOM_CHECK(t == DType::F32 || t == DType::BF16,
               "norm weight on the GPU must be f32 or bf16, got {}", dtype_name(t));
    type = t;
    return w.data();
  }
  LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
             "norm weight must be f32, f16 or bf16, got {}", dtype_name(t));
  check_not_capturing("a host norm weight");
  host_floats_.resize(static_cast<size_t>(h));
  quant::dequantize_row(t, w.data(), host_floats_.data(), h);
  void* d = param_buf_[1].ensure(static_cast<size_t>(h) * 4, stream_);
  uploader_.upload(d, host_floats_.data(), static_cast<size_t>(h) * 4, stream_);
  type = DType::F32;
  return d;
}

void CudaBackend::add(Tensor& a, const Tensor& b) {
  check_cuda_tensor(a, DType::BF16, "add a");
  check_cuda_tensor(b, DType::BF16, "add b");
  check_same_shape(a, b, "add");
  cuda::add_bf16(a.data(), b.data(), a.numel(), stream_);
  check_launch();
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim,
                       bool interleaved, float mscale) {
  check_cuda_tensor(x, DType::BF16, "rope x");
  LOOM_CHECK(x.ndim() == 3, "rope x must be [T, heads, head_dim], got {}", shape_str(x.shape()));
  const int64_t t = x.dim(0), heads = x.dim(1), hd = x.dim(2);
  LOOM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= hd && rotary_dim <= 512,
             "rotary_dim {} must be even and in (0, {}] (at most 512)", rotary_dim, hd);
  LOOM_CHECK(positions.dtype() == DType::I32 && positions.numel() == t,
             "rope positions must be i32 [{}]", t);
  LOOM_CHECK(inv_freq.dtype() == DType::F32 && inv_freq.numel() == rotary_dim / 2,
             "rope inv_freq must be f32 [{}]", rotary_dim / 2);
  const auto* pos = static_cast<const int32_t*>(device_view(positions, param_buf_[0]));
  const auto* freq = static_cast<const float*>(device_view(inv_freq, param_buf_[1]));
  cuda::rope_bf16(x.data(), t, heads, hd, pos, freq, rotary_dim, interleaved, mscale, stream_);
  check_launch();
}

void CudaBackend::gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act,
                                   Tensor& out) {
  check_cuda_tensor(gate, DType::BF16, "gated_activation gate");
  check_cuda_tensor(up, DType::BF16, "gated_activation up");
  check_cuda_tensor(out, DType::BF16, "gated_activation out");
  check_same_shape(gate, up, "gated_activation up");
  check_same_shape(gate, out, "gated_activation out");
  cuda::gated_activation_bf16(gate.data(), up.data(), out.data(), gate.numel(),
                              act == GatedActivation::GeluTanh, stream_);
  check_launch();
}

void CudaBackend::split_qkv(const Tensor& qkv, const QkvRope* rope, Tensor& q, Tensor& k, Tensor& v,
                            KvLayerCache* cache, const AttentionMetadata* meta) {
  check_cuda_tensor(qkv, DType::BF16, "split_qkv qkv");
  check_cuda_tensor(q, DType::BF16, "split_qkv q");
  LOOM_CHECK(q.ndim() == 3, "split_qkv q must be [T, heads, head_dim], got {}",
             shape_str(q.shape()));
  const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
  cuda::SplitQkvArgs a;
  int64_t kvh = 0;
  if (cache) {
    const bool fp8 = check_cache(*cache);
    LOOM_CHECK(meta != nullptr, "split_qkv into the cache needs the step's metadata");
    kvh = cache->k.dim(2);
    LOOM_CHECK(cache->k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache->k.dim(3), hd);
    LOOM_CHECK(meta->slot_mapping.size() == static_cast<size_t>(t),
               "slot_mapping must have {} entries", t);
    const int64_t slots = cache->k.dim(0) * cache->k.dim(1);
    for (int64_t i = 0; i < t; ++i)
      LOOM_CHECK(meta->slot_mapping[static_cast<size_t>(i)] < slots, "slot {} out of range [0, {})",
                 meta->slot_mapping[static_cast<size_t>(i)], slots);
    if (t > 0) a.slots = metadata_.get(*meta, t, stream_).slot_mapping;
    if (fp8) {
      a.k_cache8 = cache->k.data_as<uint8_t>();
      a.v_cache8 = cache->v.data_as<uint8_t>();
      a.k_scale = cache->k_scale.data_as<const float>();
      a.v_scale = cache->v_scale.data_as<const float>();
    } else {
      a.k_cache = static_cast<bf16_t*>(cache->k.data());
      a.v_cache = static_cast<bf16_t*>(cache->v.data());
    }
  } else {
    check_cuda_tensor(k, DType::BF16, "split_qkv k");
    check_cuda_tensor(v, DType::BF16, "split_qkv v");
    LOOM_CHECK(k.ndim() == 3 && k.dim(0) == t && k.dim(2) == hd && k.shape() == v.shape(),
               "split_qkv k {} and v {} must be [{}, kv_heads, {}]", shape_str(k.shape()),
               shape_str(v.shape()), t, hd);
    kvh = k.dim(1);
    a.k = static_cast<bf16_t*>(k.data());
    a.v = static_cast<bf16_t*>(v.data());
  }
  LOOM_CHECK(qkv.rows() == t && qkv.cols() == (heads + 2 * kvh) * hd,
             "split_qkv qkv {} must be [{}, {}]", shape_str(qkv.shape()), t,
             (heads + 2 * kvh) * hd);
  a.heads = static_cast<int>(heads);
  a.kv_heads = static_cast<int>(kvh);
  a.head_dim = static_cast<int>(hd);
  a.q = static_cast<bf16_t*>(q.data());
  if (rope) {
    LOOM_CHECK(rope->positions && rope->inv_freq, "split_qkv rope needs positions and inv_freq");
    LOOM_CHECK(rope->rotary_dim > 0 && rope->rotary_dim % 2 == 0 && rope->rotary_dim <= hd &&
                   rope->rotary_dim <= 512,
               "rotary_dim {} must be even and in (0, {}] (at most 512)", rope->rotary_dim, hd);
    LOOM_CHECK(rope->positions->dtype() == DType::I32 && rope->positions->numel() == t,
               "rope positions must be i32 [{}]", t);
    LOOM_CHECK(
        rope->inv_freq->dtype() == DType::F32 && rope->inv_freq->numel() == rope->rotary_dim / 2,
        "rope inv_freq must be f32 [{}]", rope->rotary_dim / 2);
    a.positions = static_cast<const int32_t*>(device_view(*rope->positions, param_buf_[0]));
    a.inv_freq = static_cast<const float*>(device_view(*rope->inv_freq, param_buf_[1]));
    a.rotary_dim = rope->rotary_dim;
    a.interleaved = rope->interleaved;
    a.mscale = rope->mscale;
  }
  cuda::split_qkv_bf16(qkv.data(), t, a, stream_);
  check_launch();
}

void CudaBackend::gated_activation_fused(const Tensor& gate_up, GatedActivation act, Tensor& out,
                                         const LinearWeight* next_linear) {
  check_cuda_tensor(gate_up, DType::BF16, "gated_activation_fused gate_up");
  check_cuda_tensor(out, DType::BF16, "gated_activation_fused out");
  LOOM_CHECK(gate_up.rows() == out.rows() && gate_up.cols() == 2 * out.cols(),
             "gated_activation_fused: gate_up {} must be [{}, 2 * {}]", shape_str(gate_up.shape()),
             out.rows(), out.cols());
  const bool gelu = act == GatedActivation::GeluTanh;
  cuda::Fp8RowsOut rows;
  const bool fp8 = fp8_rows_for(out, next_linear, rows);
  if (!cuda::gated_activation_fused_bf16(gate_up.data(), out.data(), out.rows(), out.cols(), gelu,
                                         stream_, fp8 ? &rows : nullptr)) {
    fp8_rows_for(out, nullptr, rows);  // the quantised rows are not written: not read either
    cuda::gated_activation_fused_bf16(gate_up.data(), out.data(), out.rows(), out.cols(), gelu,
                                      stream_);
  }
  check_launch();
}

void CudaBackend::softcap(Tensor& x, float cap) {
  check_cuda_tensor(x, DType::BF16, "softcap x");
  LOOM_CHECK(cap > 0, "softcap cap must be > 0, got {}", cap);
  cuda::softcap_bf16(x.data(), x.numel(), cap, stream_);
  check_launch();
}

}  // namespace loom::cuda
