// CudaBackend, the class behind make_cuda_backend: its members and the checks
// its ops share. The methods are defined by op family, matching kernels/<op>/:
// cuda_backend.cpp (stream, memory, step preparation, CUDA graphs),
// cuda_backend_matmul.cpp, cuda_backend_attention.cpp,
// cuda_backend_elementwise.cpp (embedding, norms, rope, activations, fused
// projections), cuda_backend_sampling.cpp, cuda_backend_copy.cpp (device
// copies, KV writes, gathers, a step's token ids) and cuda_backend_fp8.cpp
// (FP8 linear layers, FP8 KV cache checks). Internal to backend/cuda.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/step_metadata.h"
#include "backend/cuda/weight_stager.h"

namespace loom::cuda {

class Gemm;
class Fp8Gemm;
struct Fp8RowsOut;
struct Fp8WeightView;

// How the decode attention kernel splits its work: query heads of one kv
// head per block (the group's power of two, at most max_heads_per_block: 1,
// 2, 4 or 8), and a token's keys in partitions (grid z): enough blocks to
// fill the GPU (blocks_per_sm per SM, 0: as many as the kernel's occupancy
// allows), and at long contexts partitions of at most max_partition_keys
// keys, so the grid runs as several balanced waves.
struct AttentionSplit {
  int64_t max_partition_keys = 1024;
  int blocks_per_sm = 0;
  int max_heads_per_block = 8;
  // CUDA blocks ordered kv head (chunk) first, then token: the blocks that
  // run together read neighbouring head slices of the same cache slots.
  bool heads_first = true;
  // Bytes the L2 fetches from memory around each cache read of the decode
  // kernels: 128 or 256 (cp.async's L2 prefetch hint), 0: no hint. An FP8
  // cache slot holds a kv head's keys in 128 bytes (head size 128), which
  // one hint of 128 bytes fetches whole.
  int l2_prefetch = 128;
  // bf16 caches at head sizes 64, 128, 256: the decode kernel on tensor
  // cores (paged_attention_mma.cuh) for groups of more than 4 query heads
  // per KV head, where the CUDA-core kernel's FMAs, not the memory, set its
  // pace (1, the default); never (0) or at every group (2), from
  // LOOM_ATTN_BF16_MMA.
  int bf16_mma = 1;
};

// Keys per partition and partition count for tokens of up to max_keys keys,
// given `items` (token, kv head, head chunk) triples and `concurrent` blocks
// the GPU runs at once. Pure: the same inputs give the same split.
struct DecodePartitions {
  int64_t keys = 1;
  int64_t count = 1;
};
DecodePartitions decode_partitions(int64_t max_keys, int64_t items, int64_t concurrent,
                                   const AttentionSplit& split);
// AttentionSplit from LOOM_ATTN_PARTITION_KEYS, LOOM_ATTN_BLOCKS_PER_SM,
// LOOM_ATTN_HEADS_PER_BLOCK, LOOM_ATTN_HEADS_FIRST and LOOM_ATTN_L2_PREFETCH
// (unset: the defaults; a malformed value throws).
AttentionSplit attention_split_from_env();

inline void check_cuda_tensor(const Tensor& t, DType dtype, const char* what) {
  LOOM_CHECK(t.device() == Device::Cuda, "{} must be on the GPU", what);
  LOOM_CHECK(t.dtype() == dtype, "{} must be {}, got {}", what, dtype_name(dtype),
             dtype_name(t.dtype()));
  LOOM_CHECK(t.defined(), "{} has no memory", what);
}

inline void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  LOOM_CHECK(a.numel() == b.numel() && a.cols() == b.cols(), "{}: shapes {} and {} differ", what,
             shape_str(a.shape()), shape_str(b.shape()));
}

// The backend's stream. Declared first among CudaBackend's members so that it
// is destroyed last, after every buffer that frees memory in its order.
class OwnedStream {
 public:
  explicit OwnedStream(int device);
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  cudaStream_t stream() const { return stream_; }
  uint64_t fp8_prequantized() const;  // cuda_backend_fp8_prequantized

  Device device() const override { return Device::Cuda; }
  std::string name() const override;
  DType activation_dtype() const override { return DType::BF16; }

  // --- memory (cuda_backend.cpp; copy in cuda_backend_copy.cpp) ---
  Tensor alloc(DType dtype, std::vector<int64_t> shape) override;
  Tensor prepare_weight(const Tensor& host_weight) override;
  void copy_from_host(Tensor& dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override;
  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void copy(Tensor& dst, const Tensor& src) override;
  std::optional<DeviceMemory> device_memory() const override;

  // --- step preparation and CUDA graphs (cuda_backend.cpp) ---
  void prepare_attention(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                         int64_t num_blocks) override;
  bool supports_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<StepGraph> end_capture() override;
  void abort_capture() override;
  bool replay(StepGraph& graph) override;

  // --- FP8 linear layers (cuda_backend_fp8.cpp) ---
  LinearWeight prepare_linear(const LinearWeight& host) override;
  // Rows quantised by the op before (next_linear) serve this one call: the
  // next linear or linear_many, whatever its x.
  void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out) override;
  void linear_many(const Tensor& x, const std::vector<LinearJob>& jobs) override;
  std::optional<LinearWeight> stack_linear(const std::vector<const LinearWeight*>& parts) override;

  // --- ops ---
  // cuda_backend_matmul.cpp
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  // cuda_backend_elementwise.cpp
  void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, Tensor& out,
                const LinearWeight* next_linear = nullptr) override;
  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                    float weight_offset, Tensor& out,
                    const LinearWeight* next_linear = nullptr) override;
  void add(Tensor& a, const Tensor& b) override;
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim,
            bool interleaved, float mscale) override;
  void gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act,
                        Tensor& out) override;
  bool supports_fused_projections() const override { return true; }
  void split_qkv(const Tensor& qkv, const QkvRope* rope, Tensor& q, Tensor& k, Tensor& v,
                 KvLayerCache* cache, const AttentionMetadata* meta) override;
  void gated_activation_fused(const Tensor& gate_up, GatedActivation act, Tensor& out,
                              const LinearWeight* next_linear = nullptr) override;
  void softcap(Tensor& x, float cap) override;
  // cuda_backend_attention.cpp
  void paged_attention(const Tensor& q, const KvLayerCache& cache, const AttentionMetadata& meta,
                       const AttentionParams& params, Tensor& out) override;
  // cuda_backend_copy.cpp
  void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache,
                const AttentionMetadata& meta) override;
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override;

  // --- sampling (cuda_backend_sampling.cpp) ---
  void argmax_rows(const Tensor& logits, std::vector<int32_t>& out) override;
  void apply_token_bitmask(Tensor& logits, const std::vector<int32_t>& rows,
                           const std::vector<uint32_t>& words) override;
  bool has_device_sampler() const override { return true; }
  bool sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                   const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) override;
  void argmax_rows_to(const Tensor& logits, Tensor& ids) override;
  bool sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                      const std::vector<LogitEdit>& edits, Tensor& ids) override;

  // --- a step's tokens on the device (cuda_backend_copy.cpp) ---
  void resolve_token_ids(Tensor& ids, const Tensor& src) override;
  class Download;
  std::unique_ptr<TokenDownload> download_tokens(const Tensor& ids, int64_t n) override;

  // --- step timing: CUDA events on the stream (cuda_backend.cpp) ---
  std::unique_ptr<TimingMark> mark_time() override;
  std::optional<double> seconds_between(const TimingMark& from, const TimingMark& to) override;
  bool marks_on_device() const override { return true; }

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

  // A bf16 cache, or an FP8 E4M3 one with f32 scales per KV head on the GPU
  // (cuda_backend_fp8.cpp); true for FP8.
  static bool check_cache(const KvLayerCache& cache);
  // FP8 weights need FP8 tensor cores (compute capability 8.9+).
  void check_fp8_supported(const char* what) const;
  // A prepared FP8 linear weight as Fp8Gemm reads it (checked).
  Fp8WeightView fp8_view(const LinearWeight& w) const;
  // Whether the kernel writing `out` (an rms_norm or the gated activation)
  // should also write it quantised for the FP8 linear layer `next`, which
  // then reads those rows (Fp8Gemm::prequantize): where, in `rows`. Else
  // false, and rows quantised earlier are no longer read (out may hold them).
  bool fp8_rows_for(const Tensor& out, const LinearWeight* next, Fp8RowsOut& rows);

  // A device pointer to t's data: t itself when on the GPU, else an upload of
  // it into `buf` (stream-ordered, so buf may be reused by the next op).
  const void* device_view(const Tensor& t, DeviceBuffer& buf);
  // Norm weight as F32 or BF16 on the device.
  const void* norm_weight(const Tensor& w, int64_t h, DType& type);
  // rms_norm / add_rms_norm (residual non-null) after their checks.
  void run_norm(const void* x, void* residual, const void* w, DType w_type, float weight_offset,
                float eps, Tensor& out, const LinearWeight* next_linear);
  // The bias as a bf16 device vector (the type the GEMM epilogue reads).
  const void* bias_as_bf16(const Tensor& bias);

  OwnedStream owned_stream_;
  cudaStream_t stream_;
  int device_;
  cudaDeviceProp props_{};
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<Fp8Gemm> fp8_gemm_;  // made by the first FP8 weight
  bool in_linear_many_ = false;        // linear() leaves prequantised rows to linear_many
  PinnedUploader uploader_;
  // Weights' host -> device copies while the model loads; made by the first
  // weight, freed (its pinned buffers and threads) by the first step.
  std::unique_ptr<WeightStager> weight_stager_;
  WeightStager& weight_stager();
  StepMetadataCache metadata_;
  DeviceBuffer param_buf_[2], bias_buf_, gather_idx_, token_mask_, attn_partials_, attn_counters_,
      argmax_ids_;
  DeviceBuffer sample_in_, sample_ws_;  // sample_rows: specs + edits; ids, bitmaps, edited values
  std::vector<unsigned char> sample_staging_;  // sample_rows: specs + edits, uploaded in one copy
  std::vector<uint32_t> sample_seen_;          // sample_rows: per-token stamp (duplicate edits)
  uint32_t sample_stamp_ = 0;
  std::vector<float> host_floats_;
  std::vector<uint32_t> mask_staging_;  // apply_token_bitmask: rows + words, uploaded in one copy
  bool capturing_ = false;
  uint64_t capture_reallocations_ = 0;
  bool flash_prefill_ = true;  // prefill sequences go to the flash kernel (head sizes it has)
  // Split-KV sizing of the decode attention kernel (cuda_backend_attention.cpp),
  // read once by the constructor from the LOOM_ATTN_* variables
  // (src/backend/cuda/README.md).
  AttentionSplit attn_split_;
  std::vector<std::pair<int64_t, int>> attn_occupancy_;  // (kernel key, blocks per SM) seen so far
  // Blocks of the decode attention kernel one SM runs at once (cached per kernel).
  int attention_blocks_per_sm(int64_t head_dim, bool fp8, int heads_per_block, bool bf16_mma);
  struct DownloadSlot {
    int32_t* host = nullptr;
    size_t capacity = 0;  // ids
    cudaEvent_t done = nullptr;
    bool busy = false;
  };
  std::deque<DownloadSlot> download_slots_;  // download_tokens (a deque: Download keeps indices)
};

}  // namespace loom::cuda
