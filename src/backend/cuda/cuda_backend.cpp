// CudaBackend: the Backend interface on one NVIDIA GPU. Activations, weights
// and the KV cache are bf16 (vectors such as norm weights, biases and rope
// frequencies f32); all math accumulates in f32. Every op is queued on the
// backend's own stream and returns at once; copy_to_host and synchronize()
// wait. Shapes, dtypes and host-visible indices are checked here, before any
// launch; kernels trust what they are given.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/step_metadata.h"
#include "backend/cuda/weight_upload.h"

namespace loom {
namespace {

using cuda::DeviceBuffer;
using bf16_t = __nv_bfloat16;

constexpr size_t kStagedCopyMax = size_t{4} << 20;  // copy_from_host through pinned memory up to this

void check_cuda_tensor(const Tensor& t, DType dtype, const char* what) {
  LOOM_CHECK(t.device() == Device::Cuda, "{} must be on the GPU", what);
  LOOM_CHECK(t.dtype() == dtype, "{} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype()));
  LOOM_CHECK(t.defined(), "{} has no memory", what);
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  LOOM_CHECK(a.numel() == b.numel() && a.cols() == b.cols(), "{}: shapes {} and {} differ", what,
             shape_str(a.shape()), shape_str(b.shape()));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The backend's stream. Declared first among CudaBackend's members so that it
// is destroyed last, after every buffer that frees memory in its order.
class OwnedStream {
 public:
  explicit OwnedStream(int device) {
    int count = 0;
    LOOM_CUDA_CHECK(cudaGetDeviceCount(&count));
    LOOM_CHECK(device >= 0 && device < count, "CUDA device {} does not exist ({} visible)", device, count);
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~OwnedStream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : owned_stream_(device), stream_(owned_stream_.get()), device_(device) {
    check_cuda_device_supported(device);
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
    gemm_ = std::make_unique<cuda::Gemm>(stream_);
    // LOOM_FLASH_PREFILL=0: prefill tokens use the CUDA-core kernel too (A/B comparisons).
    const char* flash = std::getenv("LOOM_FLASH_PREFILL");
    flash_prefill_ = !(flash && std::strcmp(flash, "0") == 0);
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (DownloadSlot& d : download_slots_) {
      if (d.done) cudaEventDestroy(d.done);
      if (d.host) cudaFreeHost(d.host);
    }
  }

  cudaStream_t stream() const { return stream_; }

  Device device() const override { return Device::Cuda; }
  std::string name() const override {
    return fmt::format("cuda:{} ({}, sm_{}{}, {} SMs, {:.0f} GiB)", device_, props_.name, props_.major,
                       props_.minor, props_.multiProcessorCount,
                       static_cast<double>(props_.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  }
  DType activation_dtype() const override { return DType::BF16; }

  // --- memory ---
  Tensor alloc(DType dtype, std::vector<int64_t> shape) override {
    Tensor t(nullptr, dtype, std::move(shape), Device::Cuda);
    const auto bytes = static_cast<size_t>(t.nbytes());
    auto mem = cuda::device_alloc(bytes);
    if (bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(mem.get(), 0, bytes, stream_));
    return Tensor(mem.get(), dtype, t.shape(), Device::Cuda, mem);
  }

  Tensor prepare_weight(const Tensor& host_weight) override {
    if (host_weight.device() == Device::Cuda) return host_weight;
    return cuda::upload_weight(host_weight, stream_);
  }

  void copy_from_host(Tensor& dst, const void* src, size_t bytes) override {
    LOOM_CHECK(dst.device() == Device::Cuda, "copy_from_host destination must be on the GPU");
    LOOM_CHECK(bytes <= static_cast<size_t>(dst.nbytes()), "copy of {} bytes into a {}-byte tensor", bytes,
               dst.nbytes());
    if (bytes == 0) return;
    check_not_capturing("copy_from_host");
    if (bytes <= kStagedCopyMax)
      uploader_.upload(dst.data(), src, bytes, stream_);
    else
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override {
    LOOM_CHECK(src.device() == Device::Cuda, "copy_to_host source must be on the GPU");
    LOOM_CHECK(bytes <= static_cast<size_t>(src.nbytes()), "copy of {} bytes from a {}-byte tensor", bytes,
               src.nbytes());
    check_not_capturing("copy_to_host");
    if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void copy(Tensor& dst, const Tensor& src) override {
    LOOM_CHECK(dst.dtype() == src.dtype() && dst.nbytes() == src.nbytes(), "copy: {} {} into {} {}",
               dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
    if (src.device() != Device::Cuda || dst.device() != Device::Cuda) return Backend::copy(dst, src);
    if (src.nbytes() == 0) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(src.nbytes()),
                                    cudaMemcpyDeviceToDevice, stream_));
  }

  // --- step preparation and CUDA graphs ---
  void prepare_attention(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                         int64_t num_blocks) override {
    check_not_capturing("prepare_attention");
    metadata_.prepare(meta, num_tokens, block_size, num_blocks, stream_);
  }

  bool supports_capture() const override { return true; }

  void begin_capture() override {
    check_not_capturing("begin_capture");
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    metadata_.set_frozen(true);
    capture_reallocations_ = cuda::DeviceBuffer::reallocations();
  }

  std::unique_ptr<StepGraph> end_capture() override {
    LOOM_CHECK(capturing_, "end_capture without begin_capture");
    capturing_ = false;
    metadata_.set_frozen(false);
    cudaGraph_t graph = nullptr;
    LOOM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    auto g = std::make_unique<CudaStepGraph>();
    const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    LOOM_CUDA_CHECK(err);
    LOOM_CHECK(cuda::DeviceBuffer::reallocations() == capture_reallocations_,
               "device memory was reallocated while a step was being recorded");
    g->reallocations = capture_reallocations_;
    return g;
  }

  void abort_capture() override {
    if (!capturing_) return;
    capturing_ = false;
    metadata_.set_frozen(false);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture's error state
  }

  bool replay(StepGraph& graph) override {
    check_not_capturing("replay");
    auto* g = dynamic_cast<CudaStepGraph*>(&graph);
    LOOM_CHECK(g != nullptr && g->exec != nullptr, "replay: not a CUDA graph of this backend");
    if (g->reallocations != cuda::DeviceBuffer::reallocations()) return false;
    LOOM_CUDA_CHECK(cudaGraphLaunch(g->exec, stream_));
    return true;
  }

  // --- ops ---
  void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) override {
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

  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override {
    check_cuda_tensor(w, DType::BF16, "matmul weight");
    LOOM_CHECK(w.ndim() == 2, "matmul weight must be 2-D [N, K], got {}", shape_str(w.shape()));
    const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
    check_cuda_tensor(x, DType::BF16, "matmul x");
    check_cuda_tensor(out, DType::BF16, "matmul out");
    LOOM_CHECK(x.cols() == k, "matmul x {} does not match weight {}", shape_str(x.shape()),
               shape_str(w.shape()));
    LOOM_CHECK(out.rows() == m && out.cols() == n, "matmul out {} must be [{}, {}]", shape_str(out.shape()), m,
               n);
    const void* bias_dev = nullptr;
    if (bias) {
      LOOM_CHECK(bias->numel() == n, "matmul bias must have {} values, got {}", n, bias->numel());
      bias_dev = bias_as_bf16(*bias);
    }
    gemm_->run(x.data(), w.data(), bias_dev, out.data(), m, n, k);
    check_launch();
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, Tensor& out) override {
    check_cuda_tensor(x, DType::BF16, "rms_norm x");
    check_cuda_tensor(out, DType::BF16, "rms_norm out");
    check_same_shape(x, out, "rms_norm out");
    DType wt;
    const void* wd = norm_weight(w, x.cols(), wt);
    cuda::rms_norm_bf16(x.data(), nullptr, wd, wt, weight_offset, eps, out.data(), x.rows(), x.cols(), stream_);
    check_launch();
  }

  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, float weight_offset,
                    Tensor& out) override {
    check_cuda_tensor(x, DType::BF16, "add_rms_norm x");
    check_cuda_tensor(residual, DType::BF16, "add_rms_norm residual");
    check_cuda_tensor(out, DType::BF16, "add_rms_norm out");
    check_same_shape(x, residual, "add_rms_norm residual");
    check_same_shape(x, out, "add_rms_norm out");
    DType wt;
    const void* wd = norm_weight(w, x.cols(), wt);
    cuda::rms_norm_bf16(x.data(), residual.data(), wd, wt, weight_offset, eps, out.data(), x.rows(), x.cols(),
                        stream_);
    check_launch();
  }

  void add(Tensor& a, const Tensor& b) override {
    check_cuda_tensor(a, DType::BF16, "add a");
    check_cuda_tensor(b, DType::BF16, "add b");
    check_same_shape(a, b, "add");
    cuda::add_bf16(a.data(), b.data(), a.numel(), stream_);
    check_launch();
  }

  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim, bool interleaved,
            float mscale) override {
    check_cuda_tensor(x, DType::BF16, "rope x");
    LOOM_CHECK(x.ndim() == 3, "rope x must be [T, heads, head_dim], got {}", shape_str(x.shape()));
    const int64_t t = x.dim(0), heads = x.dim(1), hd = x.dim(2);
    LOOM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= hd && rotary_dim <= 512,
               "rotary_dim {} must be even and in (0, {}] (at most 512)", rotary_dim, hd);
    LOOM_CHECK(positions.dtype() == DType::I32 && positions.numel() == t, "rope positions must be i32 [{}]", t);
    LOOM_CHECK(inv_freq.dtype() == DType::F32 && inv_freq.numel() == rotary_dim / 2,
               "rope inv_freq must be f32 [{}]", rotary_dim / 2);
    const auto* pos = static_cast<const int32_t*>(device_view(positions, param_buf_[0]));
    const auto* freq = static_cast<const float*>(device_view(inv_freq, param_buf_[1]));
    cuda::rope_bf16(x.data(), t, heads, hd, pos, freq, rotary_dim, interleaved, mscale, stream_);
    check_launch();
  }

  void gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act, Tensor& out) override {
    check_cuda_tensor(gate, DType::BF16, "gated_activation gate");
    check_cuda_tensor(up, DType::BF16, "gated_activation up");
    check_cuda_tensor(out, DType::BF16, "gated_activation out");
    check_same_shape(gate, up, "gated_activation up");
    check_same_shape(gate, out, "gated_activation out");
    cuda::gated_activation_bf16(gate.data(), up.data(), out.data(), gate.numel(), act == GatedActivation::GeluTanh,
                                stream_);
    check_launch();
  }

  bool supports_fused_projections() const override { return true; }

  void split_qkv(const Tensor& qkv, const QkvRope* rope, Tensor& q, Tensor& k, Tensor& v, KvLayerCache* cache,
                 const AttentionMetadata* meta) override {
    check_cuda_tensor(qkv, DType::BF16, "split_qkv qkv");
    check_cuda_tensor(q, DType::BF16, "split_qkv q");
    LOOM_CHECK(q.ndim() == 3, "split_qkv q must be [T, heads, head_dim], got {}", shape_str(q.shape()));
    const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
    cuda::SplitQkvArgs a;
    int64_t kvh = 0;
    if (cache) {
      check_cache(*cache);
      LOOM_CHECK(meta != nullptr, "split_qkv into the cache needs the step's metadata");
      kvh = cache->k.dim(2);
      LOOM_CHECK(cache->k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache->k.dim(3), hd);
      LOOM_CHECK(meta->slot_mapping.size() == static_cast<size_t>(t), "slot_mapping must have {} entries", t);
      const int64_t slots = cache->k.dim(0) * cache->k.dim(1);
      for (int64_t i = 0; i < t; ++i)
        LOOM_CHECK(meta->slot_mapping[static_cast<size_t>(i)] < slots, "slot {} out of range [0, {})",
                   meta->slot_mapping[static_cast<size_t>(i)], slots);
      if (t > 0) a.slots = metadata_.get(*meta, t, stream_).slot_mapping;
      a.k_cache = static_cast<bf16_t*>(cache->k.data());
      a.v_cache = static_cast<bf16_t*>(cache->v.data());
    } else {
      check_cuda_tensor(k, DType::BF16, "split_qkv k");
      check_cuda_tensor(v, DType::BF16, "split_qkv v");
      LOOM_CHECK(k.ndim() == 3 && k.dim(0) == t && k.dim(2) == hd && k.shape() == v.shape(),
                 "split_qkv k {} and v {} must be [{}, kv_heads, {}]", shape_str(k.shape()), shape_str(v.shape()), t,
                 hd);
      kvh = k.dim(1);
      a.k = static_cast<bf16_t*>(k.data());
      a.v = static_cast<bf16_t*>(v.data());
    }
    LOOM_CHECK(qkv.rows() == t && qkv.cols() == (heads + 2 * kvh) * hd, "split_qkv qkv {} must be [{}, {}]",
               shape_str(qkv.shape()), t, (heads + 2 * kvh) * hd);
    a.heads = static_cast<int>(heads);
    a.kv_heads = static_cast<int>(kvh);
    a.head_dim = static_cast<int>(hd);
    a.q = static_cast<bf16_t*>(q.data());
    if (rope) {
      LOOM_CHECK(rope->positions && rope->inv_freq, "split_qkv rope needs positions and inv_freq");
      LOOM_CHECK(rope->rotary_dim > 0 && rope->rotary_dim % 2 == 0 && rope->rotary_dim <= hd && rope->rotary_dim <= 512,
                 "rotary_dim {} must be even and in (0, {}] (at most 512)", rope->rotary_dim, hd);
      LOOM_CHECK(rope->positions->dtype() == DType::I32 && rope->positions->numel() == t,
                 "rope positions must be i32 [{}]", t);
      LOOM_CHECK(rope->inv_freq->dtype() == DType::F32 && rope->inv_freq->numel() == rope->rotary_dim / 2,
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

  void gated_activation_fused(const Tensor& gate_up, GatedActivation act, Tensor& out) override {
    check_cuda_tensor(gate_up, DType::BF16, "gated_activation_fused gate_up");
    check_cuda_tensor(out, DType::BF16, "gated_activation_fused out");
    LOOM_CHECK(gate_up.rows() == out.rows() && gate_up.cols() == 2 * out.cols(),
               "gated_activation_fused: gate_up {} must be [{}, 2 * {}]", shape_str(gate_up.shape()), out.rows(),
               out.cols());
    cuda::gated_activation_fused_bf16(gate_up.data(), out.data(), out.rows(), out.cols(),
                                      act == GatedActivation::GeluTanh, stream_);
    check_launch();
  }

  void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache, const AttentionMetadata& meta) override {
    check_cache(cache);
    check_cuda_tensor(k, DType::BF16, "write_kv k");
    check_cuda_tensor(v, DType::BF16, "write_kv v");
    const int64_t row = cache.k.dim(2) * cache.k.dim(3);
    const int64_t slots = cache.k.dim(0) * cache.k.dim(1);
    const int64_t t = k.ndim() >= 1 ? k.dim(0) : 0;
    LOOM_CHECK(k.numel() == t * row && v.numel() == k.numel() && v.dim(0) == t,
               "write_kv k {} and v {} must be [T, {}, {}]", shape_str(k.shape()), shape_str(v.shape()),
               cache.k.dim(2), cache.k.dim(3));
    LOOM_CHECK(meta.slot_mapping.size() == static_cast<size_t>(t), "slot_mapping must have {} entries", t);
    for (int64_t i = 0; i < t; ++i)
      LOOM_CHECK(meta.slot_mapping[i] < slots, "slot {} out of range [0, {})", meta.slot_mapping[i], slots);
    if (t == 0) return;
    const cuda::DeviceStepMetadata& dm = metadata_.get(meta, t, stream_);
    cuda::write_kv_bf16(k.data(), v.data(), dm.slot_mapping, t, row, cache.k.data(), cache.v.data(), stream_);
    check_launch();
  }

  void paged_attention(const Tensor& q, const KvLayerCache& cache, const AttentionMetadata& meta,
                       const AttentionParams& params, Tensor& out) override;

  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    LOOM_CHECK(x.device() == Device::Cuda && out.device() == Device::Cuda, "gather_rows tensors must be on the GPU");
    const int64_t n = static_cast<int64_t>(rows.size());
    LOOM_CHECK(out.dtype() == x.dtype() && out.rows() == n && out.cols() == x.cols(),
               "gather_rows out {} must be [{}, {}] of {}", shape_str(out.shape()), n, x.cols(),
               dtype_name(x.dtype()));
    LOOM_CHECK(x.data() != out.data() || n == 0, "gather_rows cannot run in place");
    const int64_t src_rows = x.rows();
    for (int64_t i = 0; i < n; ++i)
      LOOM_CHECK(rows[i] >= 0 && rows[i] < src_rows, "gather row {} out of range [0, {})", rows[i], src_rows);
    if (n == 0) return;
    check_not_capturing("gather_rows");
    void* idx = gather_idx_.ensure(rows.size() * 4, stream_);
    uploader_.upload(idx, rows.data(), rows.size() * 4, stream_);
    cuda::gather_rows(x.data(), static_cast<const int32_t*>(idx), n, x.row_stride_bytes(), out.data(), stream_);
    check_launch();
  }

  void softcap(Tensor& x, float cap) override {
    check_cuda_tensor(x, DType::BF16, "softcap x");
    LOOM_CHECK(cap > 0, "softcap cap must be > 0, got {}", cap);
    cuda::softcap_bf16(x.data(), x.numel(), cap, stream_);
    check_launch();
  }

  void argmax_rows(const Tensor& logits, std::vector<int32_t>& out) override {
    LOOM_CHECK(logits.device() == Device::Cuda, "argmax_rows logits must be on the GPU");
    const DType t = logits.dtype();
    LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
               "argmax_rows logits must be bf16, f16 or f32, got {}", dtype_name(t));
    LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX,
               "argmax_rows: logits {} must be [rows, vocab] with 0 < vocab < 2^31", shape_str(logits.shape()));
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

  bool has_device_sampler() const override { return true; }
  bool sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                   const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) override;

  void argmax_rows_to(const Tensor& logits, Tensor& ids) override {
    LOOM_CHECK(logits.device() == Device::Cuda, "argmax_rows_to logits must be on the GPU");
    const DType t = logits.dtype();
    LOOM_CHECK(t == DType::BF16 || t == DType::F32 || t == DType::F16,
               "argmax_rows_to logits must be bf16, f16 or f32, got {}", dtype_name(t));
    LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX && logits.rows() < (int64_t{1} << 31),
               "argmax_rows_to: logits {} must be [rows, vocab]", shape_str(logits.shape()));
    check_cuda_tensor(ids, DType::I32, "argmax_rows_to ids");
    LOOM_CHECK(ids.numel() >= logits.rows(), "argmax_rows_to: {} ids for {} rows", ids.numel(), logits.rows());
    if (logits.rows() == 0) return;
    check_not_capturing("argmax_rows_to");
    cuda::argmax_rows(t, logits.data(), logits.rows(), logits.cols(), static_cast<int32_t*>(ids.data()), stream_);
    check_launch();
  }
  bool sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                      const std::vector<LogitEdit>& edits, Tensor& ids) override;

  void resolve_token_ids(Tensor& ids, const Tensor& src) override {
    check_cuda_tensor(ids, DType::I32, "resolve_token_ids ids");
    check_cuda_tensor(src, DType::I32, "resolve_token_ids source");
    check_not_capturing("resolve_token_ids");
    cuda::resolve_token_ids(static_cast<int32_t*>(ids.data()), ids.numel(), static_cast<const int32_t*>(src.data()),
                            stream_);
    check_launch();
  }

  // A pinned host buffer per download in flight (pooled), filled by an
  // async copy on the stream; wait() syncs its event only.
  class Download final : public TokenDownload {
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

  std::unique_ptr<TokenDownload> download_tokens(const Tensor& ids, int64_t n) override {
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

 private:
  struct CudaStepGraph final : StepGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t reallocations = 0;  // DeviceBuffer::reallocations() when recorded
    ~CudaStepGraph() override {
      if (exec) cudaGraphExecDestroy(exec);
    }
  };

  const int32_t* launch_sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                                    const std::vector<LogitEdit>& edits, int32_t* by_row);
  void check_launch() { LOOM_CUDA_CHECK(cudaGetLastError()); }
  void check_not_capturing(const char* what) const {
    LOOM_CHECK(!capturing_, "{} is not allowed while a step is being recorded", what);
  }

  static void check_cache(const KvLayerCache& cache) {
    LOOM_CHECK(cache.k.ndim() == 4 && cache.k.shape() == cache.v.shape(),
               "kv cache K {} and V {} must be [blocks, block_size, kv_heads, head_dim]",
               shape_str(cache.k.shape()), shape_str(cache.v.shape()));
    check_cuda_tensor(cache.k, DType::BF16, "kv cache K");
    check_cuda_tensor(cache.v, DType::BF16, "kv cache V");
  }

  // A device pointer to t's data: t itself when on the GPU, else an upload of
  // it into `buf` (stream-ordered, so buf may be reused by the next op).
  const void* device_view(const Tensor& t, DeviceBuffer& buf) {
    if (t.device() == Device::Cuda) return t.data();
    check_not_capturing("a host tensor argument");
    const auto bytes = static_cast<size_t>(t.nbytes());
    void* d = buf.ensure(std::max<size_t>(bytes, 16), stream_);
    uploader_.upload(d, t.data(), bytes, stream_);
    return d;
  }

  // Norm weight as F32 or BF16 on the device.
  const void* norm_weight(const Tensor& w, int64_t h, DType& type) {
    LOOM_CHECK(w.numel() == h, "norm weight {} must have {} values", shape_str(w.shape()), h);
    const DType t = w.dtype();
    if (w.device() == Device::Cuda) {
      LOOM_CHECK(t == DType::F32 || t == DType::BF16, "norm weight on the GPU must be f32 or bf16, got {}",
                 dtype_name(t));
      type = t;
      return w.data();
    }
    LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
               "norm weight must be f32, f16 or bf16, got {}", dtype_name(t));
    check_not_capturing("a host norm weight");
    host_floats_.resize(static_cast<size_t>(h));
    cpu::dequantize_row(t, w.data(), host_floats_.data(), h);
    void* d = param_buf_[1].ensure(static_cast<size_t>(h) * 4, stream_);
    uploader_.upload(d, host_floats_.data(), static_cast<size_t>(h) * 4, stream_);
    type = DType::F32;
    return d;
  }

  // The bias as a bf16 device vector (the type the GEMM epilogue reads).
  const void* bias_as_bf16(const Tensor& bias) {
    const DType t = bias.dtype();
    LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16, "matmul bias must be f32, f16 or bf16");
    const int64_t n = bias.numel();
    if (bias.device() == Device::Cuda && t == DType::BF16) return bias.data();
    void* d = bias_buf_.ensure(static_cast<size_t>(n) * 2, stream_);
    if (bias.device() == Device::Cuda) {
      cuda::convert(t, bias.data(), DType::BF16, d, n, stream_);
    } else {
      check_not_capturing("a host bias");
      host_floats_.resize(static_cast<size_t>(n));
      cpu::dequantize_row(t, bias.data(), host_floats_.data(), n);
      std::vector<uint16_t> b(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16_bits(host_floats_[i]);
      uploader_.upload(d, b.data(), b.size() * 2, stream_);
    }
    return d;
  }

  static uint16_t f32_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }

  OwnedStream owned_stream_;
  cudaStream_t stream_;
  int device_;
  cudaDeviceProp props_{};
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::PinnedUploader uploader_;
  cuda::StepMetadataCache metadata_;
  DeviceBuffer param_buf_[2], bias_buf_, gather_idx_, attn_partials_, attn_counters_, argmax_ids_;
  DeviceBuffer sample_in_, sample_ws_;  // sample_rows: specs + edits; ids, bitmaps, edited values
  std::vector<unsigned char> sample_staging_;  // sample_rows: specs + edits, uploaded in one copy
  std::vector<uint32_t> sample_seen_;          // sample_rows: per-token stamp (duplicate edits)
  uint32_t sample_stamp_ = 0;
  std::vector<float> host_floats_;
  bool capturing_ = false;
  uint64_t capture_reallocations_ = 0;
  bool flash_prefill_ = true;  // prefill sequences go to the flash kernel (head sizes it has)
  struct DownloadSlot {
    int32_t* host = nullptr;
    size_t capacity = 0;  // ids
    cudaEvent_t done = nullptr;
    bool busy = false;
  };
  std::deque<DownloadSlot> download_slots_;  // download_tokens (a deque: Download keeps indices)
};

void CudaBackend::paged_attention(const Tensor& q, const KvLayerCache& cache, const AttentionMetadata& meta,
                                  const AttentionParams& params, Tensor& out) {
  check_cache(cache);
  check_cuda_tensor(q, DType::BF16, "attention q");
  check_cuda_tensor(out, DType::BF16, "attention out");
  LOOM_CHECK(q.ndim() == 3, "attention q must be [T, heads, head_dim], got {}", shape_str(q.shape()));
  const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
  const int64_t num_blocks = cache.k.dim(0), bs = cache.k.dim(1), kvh = cache.k.dim(2);
  LOOM_CHECK(cache.k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache.k.dim(3), hd);
  LOOM_CHECK(cuda::paged_attention_supports_head_dim(hd),
             "CUDA attention supports head_dim a multiple of 8 in [8, 256]; got {}", hd);
  LOOM_CHECK(kvh > 0 && heads % kvh == 0, "heads {} must be a multiple of kv heads {}", heads, kvh);
  LOOM_CHECK(out.numel() == q.numel() && out.dim(0) == t, "attention out {} must be like q {}",
             shape_str(out.shape()), shape_str(q.shape()));
  LOOM_CHECK(out.data() != q.data(), "attention cannot run in place");
  LOOM_CHECK(bs > 0, "block size must be > 0");
  LOOM_CHECK(aligned16(q.data()) && aligned16(out.data()) && aligned16(cache.k.data()) &&
                 aligned16(cache.v.data()),
             "attention tensors must be 16-byte aligned");
  LOOM_CHECK(t < (int64_t{1} << 31) && num_blocks * bs < (int64_t{1} << 31), "attention sizes overflow int32");
  if (t == 0) {
    check_attention_metadata(meta, t, bs, num_blocks);
    return;
  }
  const cuda::DeviceStepMetadata& dm = metadata_.get(meta, t, stream_);
  metadata_.validate(meta, t, bs, num_blocks);  // before any kernel reads through the block tables

  const int64_t group = heads / kvh;
  // Sequences with more than one new token go to the flash prefill kernel
  // (head sizes 64, 128, 256); the CUDA-core kernel below then covers only
  // the decode tokens (dm.decode_tokens). A step of decodes only launches the
  // CUDA-core kernel over all tokens, as recorded steps expect.
  cuda::PagedKvArgs kv_args;  // what both kernels read
  kv_args.q = q.data();
  kv_args.out = out.data();
  kv_args.k_cache = cache.k.data();
  kv_args.v_cache = cache.v.data();
  kv_args.query_start = dm.query_start;
  kv_args.context_lens = dm.context_lens;
  kv_args.block_tables = dm.block_tables;
  kv_args.max_blocks_per_seq = meta.max_blocks_per_seq;
  kv_args.num_heads = static_cast<int32_t>(heads);
  kv_args.num_kv_heads = static_cast<int32_t>(kvh);
  kv_args.head_dim = static_cast<int32_t>(hd);
  kv_args.block_size = static_cast<int32_t>(bs);
  kv_args.block_shift = (bs & (bs - 1)) == 0 ? std::countr_zero(static_cast<uint64_t>(bs)) : -1;
  kv_args.scale = params.scale;
  kv_args.softcap = params.logit_softcap;
  kv_args.sliding_window = params.sliding_window;
  const bool flash = flash_prefill_ && dm.has_prefill && cuda::flash_prefill_supports_head_dim(hd);
  if (flash) {
    LOOM_CHECK(t * heads < (int64_t{1} << 31), "attention sizes overflow int32");
    const cuda::PrefillTiles tiles = metadata_.prefill_tiles(meta, t, static_cast<int>(group), stream_);
    LOOM_CHECK(tiles.count * kvh < (int64_t{1} << 31), "too many flash attention tiles: {}", tiles.count);
    cuda::FlashPrefillArgs f;
    static_cast<cuda::PagedKvArgs&>(f) = kv_args;
    f.tiles = tiles.tiles;
    f.num_tiles = tiles.count;
    LOOM_CHECK(cuda::flash_prefill_bf16(f, stream_), "no flash attention kernel for head_dim {}", hd);
    check_launch();
    if (dm.num_decode_tokens == 0) return;
  }
  // Tokens the CUDA-core kernel covers (and whether a sequence is among them).
  const int64_t num_old = flash ? dm.num_decode_tokens : t;
  auto covered = [&](int s) {
    const int32_t n_new = meta.query_start[s + 1] - meta.query_start[s];
    return n_new > 0 && (!flash || n_new == 1);
  };

  int g = 1;  // query heads per block: the power of two covering the group, at most 8
  while (g < 8 && g < group) g *= 2;
  const int64_t chunks = ceil_div(group, g);
  // Longest key range of any token (or the step's stated bound): sizes the partitions.
  int64_t max_keys = 1;
  if (meta.max_context_bound > 0) {
    max_keys = meta.max_context_bound;
    if (params.sliding_window > 0) max_keys = std::min<int64_t>(max_keys, params.sliding_window);
  }
  for (int s = 0; s < meta.num_seqs && meta.max_context_bound <= 0; ++s) {
    if (!covered(s)) continue;
    int64_t keys = meta.context_lens[s];
    if (params.sliding_window > 0) keys = std::min<int64_t>(keys, params.sliding_window);
    max_keys = std::max(max_keys, keys);
  }
  // Split the keys when there are too few (token, kv head) items to fill the
  // GPU: aim at ~4 blocks per SM, partitions of at least kMinPartition keys
  // (a block walks 16-32 keys per iteration: a few iterations each, so a
  // single-stream decode is not bound by one block's latency chain).
  constexpr int64_t kMinPartition = 32;
  const int64_t items = num_old * kvh * chunks;
  const int64_t target = 4 * static_cast<int64_t>(props_.multiProcessorCount);
  int64_t parts = items >= target ? 1 : std::min<int64_t>(ceil_div(target, items), cuda::kMaxAttnPartitions);
  int64_t partition = std::max(kMinPartition, ceil_div(ceil_div(max_keys, parts), 32) * 32);
  parts = ceil_div(max_keys, partition);
  if (parts <= 1) partition = max_keys;

  cuda::PagedAttentionArgs a;
  static_cast<cuda::PagedKvArgs&>(a) = kv_args;
  a.token_seq = dm.token_seq;
  a.token_index = flash ? dm.decode_tokens : nullptr;
  a.num_tokens = static_cast<int32_t>(num_old);
  a.heads_per_block = g;
  a.head_chunks = static_cast<int32_t>(chunks);
  a.partition_keys = static_cast<int32_t>(std::min<int64_t>(partition, int64_t{1} << 30));
  a.num_partitions = static_cast<int32_t>(std::max<int64_t>(parts, 1));
  if (a.num_partitions > 1) {
    const size_t rows = static_cast<size_t>(num_old * heads * a.num_partitions);
    auto* ws = static_cast<float*>(attn_partials_.ensure(rows * static_cast<size_t>(hd + 2) * 4, stream_));
    a.partial_acc = ws;
    a.partial_ml = ws + rows * static_cast<size_t>(hd);
    a.partition_counters = static_cast<int32_t*>(
        attn_counters_.ensure_zeroed(static_cast<size_t>(num_old * kvh * chunks) * 4, stream_));
  }
  LOOM_CHECK(cuda::paged_attention_bf16(a, stream_), "no attention kernel for head_dim {}", hd);
  check_launch();
}

bool CudaBackend::sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                              const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) {
  out.assign(specs.size(), 0);
  const int32_t* ids = launch_sample_rows(logits, specs, edits, nullptr);
  if (specs.empty()) return true;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(out.data(), ids, specs.size() * 4, cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return true;
}

bool CudaBackend::sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                                 const std::vector<LogitEdit>& edits, Tensor& ids) {
  check_cuda_tensor(ids, DType::I32, "sample_rows_to ids");
  LOOM_CHECK(ids.numel() >= logits.rows(), "sample_rows_to: {} ids for {} rows", ids.numel(), logits.rows());
  launch_sample_rows(logits, specs, edits, static_cast<int32_t*>(ids.data()));
  return true;
}

// Checks and converts the specs (see cuda::SampleRowSpec), uploads specs and
// edits in one pinned copy and launches the draws: into `by_row` at each
// spec's row, or (null) into the workspace by spec, returned.
const int32_t* CudaBackend::launch_sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                                               const std::vector<LogitEdit>& edits, int32_t* by_row) {
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

}  // namespace

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

void* cuda_backend_stream(Backend& backend) {
  auto* cb = dynamic_cast<CudaBackend*>(&backend);
  LOOM_CHECK(cb != nullptr, "not a CUDA backend: {}", backend.name());
  return static_cast<void*>(cb->stream());
}

}  // namespace loom
