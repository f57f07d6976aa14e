// FP8 linear layers of the CUDA backend (W8A8): out[m, n] = x[m, k] .
// dequant(w)^T (+ bias), bf16 x and out, FP8 E4M3 weights with per-row or
// 128x128-block scales; x quantised to FP8 per row, per 128-column group
// (block-scaled weights) or with a static scale:
//   m <= kFp8MatmulMaxRows, 128x128-block weights: our tensor-core kernel
//     (kernels/fp8/fp8_matmul.cu), bound by streaming the weights once
//     (decode steps), quantising x on the fly. Per-row and per-tensor
//     weights take the wgmma GEMMs below at every m by default, so that a request's tokens
//     alone and in a batch agree: the kernel sums 128 products at a time in
//     f16 HMMAs, Hopper's FP8 wgmma (cuBLASLt, CUTLASS) keeps fewer bits of
//     its sums (DeepSeek-V3 measured ~14), and about 6% of bf16 outputs come
//     out one unit apart (test_cuda_fp8 SmallMAndBatchPathsAgree; the
//     kernel's are slightly closer to the exact sums), which flips near-ties
//     of greedy decoding (block-scaled weights too: kernel vs CUTLASS).
//     LOOM_FP8_SMALL_M=1 sends every scheme's small products
//     to the kernel (faster: on an H100, per-row scales, an 8B layer's four
//     products at 1-8 rows 96-102 us vs cuBLASLt's 108-125), =0 none;
//   otherwise x is quantised (kernels/fp8/quantize.cu) for cuBLASLt's FP8
//     GEMM with its Hopper scaling modes: per-row weights and rows of x as
//     outer vectors (OUTER_VEC_32F both), or 128x128 weight blocks with 1x128
//     groups of x (BLK128x128_32F / VEC128_32F; x's rows padded to a multiple
//     of 4, its scales laid out group-major); where cuBLASLt has no outer-vector
//     scaling (13.x on sm_90), its FP8 GEMM with unit scales and then one pass
//     applying x's row scales, the weight's row scales and the bias;
//   128x128 weight blocks on sm_90 first go to CUTLASS's blockwise-scaled FP8
//     GEMM (kernels/fp8/fp8_block_gemm.h; n and k multiples of 128), which
//     cuBLASLt lacks there; per-row scales too from LOOM_FP8_CUTLASS_ROWS_FROM
//     = 65 rows (0: never): CUTLASS's FP8 GEMM applying x's and the weight's
//     row scales once in its epilogue (no f32 product, no scaling pass;
//     64-row tiles up to LOOM_FP8_ROW_SMALL_TILE_ROWS = 64 rows where a lower
//     LOOM_FP8_CUTLASS_ROWS_FROM sends such products there, 128-row tiles
//     above, the same bits), faster for batches and prefill, slower at one
//     row (on an H100, 8B shape: offline +5%). cuBLASLt's unit-scale product
//     (preferred then, on sm_90, over any per-row scaled GEMM of its own) and
//     the scaling pass give the same bits as CUTLASS's GEMM where cuBLASLt
//     sums k in one pass (test_cuda_fp8 CublasLtAndCutlassRowGemmsAgree: the
//     8B shapes at 1-300 rows; LOOM_FP8_CUBLASLT_SPLIT_K=0 keeps cuBLASLt to
//     such algorithms; with its own choice, split-K included, no output
//     differed there on an H100), so rows come out the same whichever takes them;
//   per-row products of one row (decode at batch 1) go to the split-k
//     kernel (fp8_row_split), the same bits as CUTLASS's GEMM and faster
//     there than cuBLASLt's product and pass; LOOM_FP8_ROW_SPLIT_ROWS=N
//     moves the limit (kFp8RowSplitMaxRows at most; 0: never; slower than
//     cuBLASLt from two rows);
//   shapes cuBLASLt has no FP8 algorithm for: our kernel over tiles of 8 rows.
// Both quantise x the same way, bit for bit. Plans are cached per shape.
// x may arrive quantised already (prequantize: the RMSNorm or gated
// activation that wrote it wrote its FP8 rows too; LOOM_FP8_PREQUANTIZE=0:
// never); run() then skips its quantising pass.
// LOOM_FP8_FAST_ACCUM=1 (off by default): per-row products keep all of k
// in the tensor core's accumulator (cuBLASLt's FAST_ACCUM, CUTLASS's
// FP8FastAccum schedules, which agree bit for bit with cuBLASLt kept to
// algorithms without split-K, as it then is; no split-k kernel):
// fewer bits in the sums, a few percent faster on an H100.
// LOOM_FP8_STREAM=1 (experimental, off by default) sends products of one or
// two rows, every scheme, to the persistent streaming kernel
// (kernels/fp8/fp8_stream.cu) where it takes the shape; LOOM_FP8_STREAM_CHUNK
// (bytes of k per stage and row, default 1024) and LOOM_FP8_STREAM_BLOCKS
// (blocks per SM, default 1) shape it.
// Internal to backend/cuda; used from one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/gemm.h"  // the cuBLAS headers and LOOM_CUBLAS_CHECK
#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/kernels.h"  // Fp8RowsOut
#include "backend/linear.h"

namespace loom::cuda {

// A prepared FP8 weight as Fp8Gemm reads it (device pointers).
struct Fp8WeightView {
  const uint8_t* w = nullptr;  // [n, k]
  int64_t n = 0, k = 0;
  const float* scale = nullptr;  // per row [n], or blocks [ceil(n / 128), scale_ld]
  int64_t scale_ld = 0;
  bool block = false;
  Fp8Activation activation = Fp8Activation::DynamicToken;
  const float* input_scale = nullptr;  // Static: one f32
};

class Fp8Gemm {
 public:
  explicit Fp8Gemm(cudaStream_t stream);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Which kernel computes a product (each call counts once).
  enum class Path { SmallM, CublasLt, Tiled, Cutlass, Stream, RowSplit };
  // Forces a path for tests and comparisons (Tiled works for every shape;
  // CublasLt throws where cuBLASLt has no algorithm, Cutlass where
  // fp8_block_gemm_supported says no, Stream where
  // fp8_stream_matmul_supported says no, RowSplit where
  // fp8_row_split_plan says no); nullopt: the usual choice.
  void force_path(std::optional<Path> path) { forced_ = path; }
  // The split-k kernel's blocks per tile along k (tests; 0: its own choice).
  void force_row_splits(int64_t splits) { row_split_splits_ = splits; }
  // Whether cuBLASLt may split k over CUDA blocks and reduce the parts
  // (LOOM_FP8_CUBLASLT_SPLIT_K=0: no); drops the cached plans.
  void allow_cublaslt_split_k(bool allow);
  // Per-row scaled products with all of k in the tensor core's accumulator
  // (LOOM_FP8_FAST_ACCUM=1; off by default): cuBLASLt's FAST_ACCUM and
  // CUTLASS's FP8FastAccum schedules, no f32 promotion every 128 columns;
  // cuBLASLt then without split-K, so that the two agree bit for bit; the
  // split-k kernel (promoted sums) is not used unless forced. Drops the
  // cached plans.
  void set_fast_accum(bool fast);
  struct Stats {
    uint64_t small_m = 0, cublaslt = 0, tiled = 0, cutlass = 0, stream = 0, row_split = 0;
    uint64_t cublaslt_unit_scales = 0;  // of cublaslt: unit scales + scale_fp8_product
    uint64_t prequantized = 0;          // products whose x came quantised (prequantize)
    int row_split_last_splits = 0, row_split_last_tile_rows = 0;  // the last split-k product's
  };
  const Stats& stats() const { return stats_; }

  // x bf16 [m, k] (16-byte aligned, k a multiple of 16), bias bf16 [n] or
  // null, out bf16 [m, n]; asynchronous on the stream.
  void run(const void* x, int64_t m, const Fp8WeightView& w, const void* bias, void* out);

  // x's rows quantised by the kernel that writes them (an rms_norm or gated
  // activation writing Fp8RowsOut too) rather than by run(): where run(x, m,
  // w') would quantise x for w' as it would for w (per-row weights, the same
  // mode and static scale), it reads these rows instead. Returns where the
  // producer writes them, or nullopt where run(x, m, w) would not read
  // quantised rows (block-scaled weights, our kernels that quantise on the
  // fly, forced paths; LOOM_FP8_PREQUANTIZE=0: always). The rows must reach
  // run() unchanged; prequantized_done() (or any other rows' quantisation)
  // ends their use (CudaBackend: after the one linear or linear_many call
  // that follows).
  std::optional<Fp8RowsOut> prequantize(const void* x, int64_t m, const Fp8WeightView& w);
  void prequantized_done() { pre_ = {}; }

 private:
  // (padded m, n, k, block, bias, alignment of w, out)
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;        // cuBLASLt offered an algorithm
    bool fused_bias = false;   // with the bias epilogue
    bool scale_after = false;  // unit scales, f32 product; scale_fp8_product applies them
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // of the heuristic query
  };
  Plan* plan_for(const Key& key);
  // CUTLASS's block-scaled GEMM when it takes the shape (else false, nothing queued).
  bool run_cutlass(const void* x, int64_t m, const Fp8WeightView& w, const void* bias, void* out);
  // x quantised for w (per row, per 128-column group, or static) into xq_ and
  // x_scale_, with mp >= m rows (the padding zero): (xq, x's scales).
  std::pair<uint8_t*, float*> quantize_x(const void* x, int64_t m, int64_t mp,
                                         const Fp8WeightView& w);
  // fp8_block_gemm's and fp8_row_split's arguments but xq and x_scale.
  Fp8BlockGemmArgs sm90_args(int64_t m, const Fp8WeightView& w, const void* bias, void* out) const;
  // The split-k kernel for few rows of per-row scaled weights, when it takes the shape.
  bool run_row_split(const void* x, int64_t m, const Fp8WeightView& w, const void* bias, void* out);
  Plan make_plan(const Key& key, bool with_bias, bool unit_scales);
  static void destroy(Plan& p);

  cudaStream_t stream_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int small_m_ = -1;  // -1: block-scaled weights only; LOOM_FP8_SMALL_M=0: none, =1: every scheme
  // Per-row products of at least this many rows go to CUTLASS
  // (LOOM_FP8_CUTLASS_ROWS_FROM; 0: none).
  int64_t cutlass_rows_from_ = 65;
  // Per-row products of at most this many rows go to the split-k kernel
  // (LOOM_FP8_ROW_SPLIT_ROWS, up to kFp8RowSplitMaxRows; 0: none). One row
  // by default: there it beats cuBLASLt's GEMM with its scaling pass inside
  // a decode step; at two rows and more it does not.
  int64_t row_split_rows_ = 1;
  int64_t row_split_splits_ = 0;  // force_row_splits
  int64_t small_tile_rows_ = 64;  // LOOM_FP8_ROW_SMALL_TILE_ROWS: CUTLASS's 64-row tiles up to it
  bool cublaslt_split_k_ =
      true;                     // LOOM_FP8_CUBLASLT_SPLIT_K=0: cuBLASLt algorithms without split-K
  bool stream_path_ = false;    // LOOM_FP8_STREAM=1: the persistent kernel at one or two rows
  bool prequantize_ = true;     // LOOM_FP8_PREQUANTIZE=0: x always quantised by run()
  int large_tile_ = 0;          // LOOM_FP8_ROW_TILE: Fp8BlockGemmArgs::large_tile (0: by shape)
  bool fast_accum_ = false;     // set_fast_accum
  Fp8StreamConfig stream_cfg_;  // LOOM_FP8_STREAM_CHUNK, LOOM_FP8_STREAM_BLOCKS (A/B sweeps)
  int sms_ = 0;
  // CUTLASS's row GEMM or the split-k kernel may take per-row products here
  // (built in, an sm_90 GPU, either on): cuBLASLt's unit-scale plans first.
  bool matches_sm90_ = false;
  bool unit_scale_logged_ = false;
  bool scaled_logged_ = false;
  std::optional<Path> forced_;
  // prequantize's rows (in xq_ and x_scale_): x, m, k, mode, static scale.
  struct Prequantized {
    const void* x = nullptr;
    int64_t m = 0, k = 0;
    Fp8ActMode mode = Fp8ActMode::Token;
    const float* static_scale = nullptr;
  } pre_;
  Stats stats_;
  std::map<Key, Plan> plans_;
  DeviceBuffer xq_, x_scale_, out_pad_, out_f32_, split_partials_, split_counters_;
};

}  // namespace loom::cuda
