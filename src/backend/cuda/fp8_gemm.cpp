// Fp8Gemm (fp8_gemm.h). As in gemm.cpp, row-major out = x . w^T is the
// column-major D[n, m] = op(A) B with A = w (a column-major [k, n] matrix,
// TRANSA = T) and B = x (column-major [k, m], TRANSB = N), so cuBLASLt's A
// scales are the weight's and its B scales x's.
#include "backend/cuda/fp8_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <tuple>
#include <utility>

#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/kernels.h"
#include "core/logging.h"

namespace loom::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

Fp8ActMode act_mode(const Fp8WeightView& w) {
  if (w.block) return Fp8ActMode::Group;
  return w.activation == Fp8Activation::Static ? Fp8ActMode::Static : Fp8ActMode::Token;
}

}  // namespace

Fp8Gemm::Fp8Gemm(cudaStream_t stream) : stream_(stream) {
  LOOM_CUBLAS_CHECK(cublasLtCreate(&lt_));
  workspace_bytes_ = kWorkspaceBytes;
  LOOM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  const char* env = std::getenv("LOOM_FP8_SMALL_M");
  if (env && std::string_view(env) == "0") small_m_ = 0;
  if (env && std::string_view(env) == "1") small_m_ = 1;
  cutlass_rows_from_ =
      env_int("LOOM_FP8_CUTLASS_ROWS_FROM", 0, int64_t{1} << 40, cutlass_rows_from_);
  row_split_rows_ = env_int("LOOM_FP8_ROW_SPLIT_ROWS", 0, kFp8RowSplitMaxRows, row_split_rows_);
  if (std::getenv("LOOM_FP8_CUTLASS_ROWS"))
    LOOM_LOG_WARN(
        "LOOM_FP8_CUTLASS_ROWS is no longer read: CUTLASS takes per-row FP8 products from "
        "LOOM_FP8_CUTLASS_ROWS_FROM rows (default 65; 0: never)");
  small_tile_rows_ = env_int("LOOM_FP8_ROW_SMALL_TILE_ROWS", 0, int64_t{1} << 40, small_tile_rows_);
  large_tile_ = static_cast<int>(env_int("LOOM_FP8_ROW_TILE", 0, 3, large_tile_));
  const char* split_env = std::getenv("LOOM_FP8_CUBLASLT_SPLIT_K");
  cublaslt_split_k_ = !(split_env && std::string_view(split_env) == "0");
  const char* fast_env = std::getenv("LOOM_FP8_FAST_ACCUM");
  fast_accum_ = fast_env && std::string_view(fast_env) == "1";
  const char* pre_env = std::getenv("LOOM_FP8_PREQUANTIZE");
  prequantize_ = !(pre_env && std::string_view(pre_env) == "0");
  const char* stream_env = std::getenv("LOOM_FP8_STREAM");
  stream_path_ = stream_env && std::string_view(stream_env) == "1";
  stream_cfg_.chunk =
      static_cast<int>(env_int("LOOM_FP8_STREAM_CHUNK", 1, 1 << 20, stream_cfg_.chunk));
  stream_cfg_.blocks_per_sm =
      static_cast<int>(env_int("LOOM_FP8_STREAM_BLOCKS", 1, 1 << 20, stream_cfg_.blocks_per_sm));
  LOOM_CHECK(
      !stream_path_ || fp8_stream_matmul_supported(1, 4096, stream_cfg_),
      "LOOM_FP8_STREAM_CHUNK={} / LOOM_FP8_STREAM_BLOCKS={}: no such streaming kernel (chunk: a "
      "multiple of 128 up to 4096; 1-4 blocks per SM, four stages of 16 rows fitting in its "
      "share of shared memory)",
      stream_cfg_.chunk, stream_cfg_.blocks_per_sm);
  int device = 0, major = 0, minor = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  matches_sm90_ = fp8_block_gemm_built() && major * 10 + minor == 90 &&
                  (cutlass_rows_from_ > 0 || row_split_rows_ > 0);
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (lt_) cublasLtDestroy(lt_);
  if (workspace_) cudaFree(workspace_);
}

void Fp8Gemm::allow_cublaslt_split_k(bool allow) {
  cublaslt_split_k_ = allow;
  for (auto& [key, plan] : plans_) destroy(plan);
  plans_.clear();
}

void Fp8Gemm::set_fast_accum(bool fast) {
  fast_accum_ = fast;
  for (auto& [key, plan] : plans_) destroy(plan);
  plans_.clear();
}

void Fp8Gemm::destroy(Plan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  p = Plan{};
}

Fp8Gemm::Plan Fp8Gemm::make_plan(const Key& key, bool with_bias, bool unit_scales) {
  const auto [m, n, k, block, bias, align_w, align_out] = key;
  Plan p;
  p.scale_after = unit_scales;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, attr, &value, sizeof(value)));
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cublasLtMatmulMatrixScale_t a_mode = block ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                   : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const cublasLtMatmulMatrixScale_t b_mode =
      block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (!unit_scales) {  // else the default: scalar scales, left unset (1)
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
  }
  if (fast_accum_ && !block) set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{1});
  if (with_bias) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  }
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(n), k));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(k),
                                               static_cast<uint64_t>(m), k));
  // Unit scales: an f32 product, scaled and rounded to bf16 once afterwards.
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, unit_scales ? CUDA_R_32F : CUDA_R_16BF,
                                               static_cast<uint64_t>(n), static_cast<uint64_t>(m),
                                               n));
  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  const uint32_t al_a = static_cast<uint32_t>(align_w), al_b = 256,
                 al_d = unit_scales ? 256u : static_cast<uint32_t>(align_out);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                       sizeof(al_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                       sizeof(al_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                       sizeof(al_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                       sizeof(al_d));
  // Only algorithms that sum all of k in one pass; with fast accumulation
  // always (a split's partial sums would be added in f32, which CUTLASS's
  // fast-accumulating GEMM never does).
  if (!cublaslt_split_k_ || fast_accum_) {
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none,
                                         sizeof(none));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref,
                                                           kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.status = st;
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
    if (!cublaslt_split_k_) {  // an algorithm whose split count is unknown does not qualify
      int32_t splits = 0;
      size_t written = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                               &splits, sizeof(splits),
                                               &written) != CUBLAS_STATUS_SUCCESS ||
          splits > 1)
        continue;
    }
    p.algo = results[i].algo;
    p.found = true;
    p.fused_bias = with_bias;
    break;
  }
  return p;
}

Fp8Gemm::Plan* Fp8Gemm::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    const bool block = std::get<3>(key), bias = std::get<4>(key);
    // Per-row scales where CUTLASS's GEMM or the split-k kernel takes other
    // row counts: the unit-scale product and the pass first, whose bits
    // theirs match (a cuBLASLt that scales per row itself rounds its own way).
    const bool unit_first = !block && matches_sm90_;
    Plan p;
    if (unit_first) p = make_plan(key, false, true);
    if (!p.found) {
      destroy(p);
      p = make_plan(key, bias, false);
    }
    if (!p.found && bias) {  // no algorithm with the bias epilogue: plain GEMM + bias kernel
      destroy(p);
      p = make_plan(key, false, false);
    }
    if (p.found && unit_first && !p.scale_after && !scaled_logged_) {
      LOOM_LOG_WARN(
          "FP8: cuBLASLt has no unit-scale FP8 GEMM here, only one applying per-row scales "
          "itself: its products may round differently from CUTLASS's, so a request's tokens "
          "can differ alone and in a batch");
      scaled_logged_ = true;
    }
    if (!p.found && !block && !unit_first) {
      // No outer-vector scaling (cuBLASLt 13 on sm_90 has none): the FP8
      // GEMM with unit scales, then one pass applies both scales and the bias.
      destroy(p);
      p = make_plan(key, false, true);
      if (p.found && !unit_scale_logged_) {
        LOOM_LOG_INFO(
            "FP8: cuBLASLt has no per-row scaled FP8 GEMM here; FP8 GEMM with unit scales + a "
            "scaling pass");
        unit_scale_logged_ = true;
      }
    }
    if (!p.found) {
      const auto [m, n, k, block, bias, aw, ao] = key;
      LOOM_LOG_WARN(
          "cuBLASLt has no FP8 GEMM for m {} n {} k {} ({} scales{}; heuristic: {}); using "
          "loom's FP8 kernel",
          m, n, k, block ? "128x128 block" : "per-row",
          cublaslt_split_k_ ? "" : ", without split-K (LOOM_FP8_CUBLASLT_SPLIT_K=0)",
          cublasGetStatusString(p.status));
    }
    it = plans_.emplace(key, p).first;
  }
  return it->second.found ? &it->second : nullptr;
}

void Fp8Gemm::run(const void* x, int64_t m, const Fp8WeightView& w, const void* bias, void* out) {
  if (m <= 0 || w.n <= 0) return;
  const int64_t n = w.n, k = w.k;
  // 1x128 block scaling wants x's rows (cuBLASLt's n) padded to a multiple of 4.
  const int64_t mp = w.block ? round_up(m, 4) : m;
  const Fp8ActMode mode = act_mode(w);
  const bool small_m = small_m_ == 1 || (small_m_ == -1 && w.block);
  Path path = m <= kFp8MatmulMaxRows && small_m ? Path::SmallM : Path::CublasLt;
  const bool want_stream = forced_ ? *forced_ == Path::Stream : stream_path_;
  const bool stream_ok = want_stream && fp8_stream_matmul_supported(m, k, stream_cfg_);
  if (stream_ok) path = Path::Stream;
  Plan* plan = nullptr;
  if (forced_) path = *forced_;
  // Per-row scales, few rows: the split-k kernel (same bits as CUTLASS's GEMM).
  if (!forced_ ? path == Path::CublasLt && !w.block && m <= row_split_rows_ && !fast_accum_
               : *forced_ == Path::RowSplit) {
    if (run_row_split(x, m, w, bias, out)) return;
    LOOM_CHECK(!forced_, "no split-k FP8 kernel for m {} n {} k {}", m, n, k);
  }
  // Block-scaled weights: CUTLASS's GEMM before cuBLASLt (which has none on
  // sm_90); per-row scales too from LOOM_FP8_CUTLASS_ROWS_FROM rows.
  const bool cutlass_first =
      forced_ ? *forced_ == Path::Cutlass
              : path == Path::CublasLt &&
                    (w.block || (cutlass_rows_from_ > 0 && m >= cutlass_rows_from_));
  if (cutlass_first && run_cutlass(x, m, w, bias, out)) return;
  LOOM_CHECK(path != Path::Cutlass, "no CUTLASS FP8 GEMM for m {} n {} k {}", m, n, k);
  LOOM_CHECK(path != Path::Stream || stream_ok, "no streaming FP8 kernel for m {} k {}", m, k);
  if (path == Path::CublasLt) {
    plan = plan_for(Key{mp, n, k, w.block, bias != nullptr, alignment_of(w.w), alignment_of(out)});
    LOOM_CHECK(plan || !forced_, "cuBLASLt has no FP8 GEMM for m {} n {} k {}", mp, n, k);
    if (!plan) path = Path::Tiled;
  }
  if (path != Path::CublasLt) {  // our kernel, quantising x on the way
    Fp8MatmulArgs a;
    a.x = x;
    a.m = m;
    a.mode = mode;
    // Token mode: one or two rows' maxima are reduced by every CUDA block
    // itself while its first weights load (the row is in L2); more rows get
    // a pass of partial maxima first, so that blocks do not each read 8 rows.
    if (mode == Fp8ActMode::Token && m > kFp8InBlockAmaxRows && path != Path::Stream) {
      a.amax_parts = fp8_row_amax_parts(k);
      pre_ = {};  // x_scale_ is overwritten
      auto* partial =
          static_cast<float*>(x_scale_.ensure(static_cast<size_t>(m * a.amax_parts) * 4, stream_));
      fp8_row_amax(x, m, k, partial, stream_);
      a.row_amax = partial;
    }
    a.static_scale = w.input_scale;
    a.w = w.w;
    a.w_scale = w.scale;
    a.w_scale_ld = w.scale_ld;
    a.n = n;
    a.k = k;
    a.bias = bias;
    a.out = out;
    if (path == Path::Stream) {
      fp8_stream_matmul(a, sms_, stream_cfg_, stream_);
      stats_.stream++;
      return;
    }
    fp8_matmul(a, stream_);
    (path == Path::SmallM ? stats_.small_m : stats_.tiled)++;
    return;
  }
  const auto [xq, xs] = quantize_x(x, m, mp, w);
  // D [n, mp]: the caller's out when no rows are padded, else a scratch whose
  // first m columns (contiguous) are copied out.
  void* d = mp == m ? out : out_pad_.ensure(static_cast<size_t>(mp * n) * 2, stream_);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* ptr) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, attr, &ptr, sizeof(ptr)));
  };
  const float alpha = 1.0f, beta = 0.0f;
  if (plan->scale_after) {
    // f32 products of at most ~128 MiB at a time, each scaled into out.
    const int64_t chunk = std::clamp<int64_t>((int64_t{128} << 20) / (n * 4) / 16 * 16, 16, 4096);
    auto* prod = static_cast<float*>(
        out_f32_.ensure(static_cast<size_t>(std::min(m, chunk) * n) * 4, stream_));
    for (int64_t r0 = 0; r0 < m; r0 += chunk) {
      const int64_t rows = std::min(chunk, m - r0);
      Plan* pc = rows == m
                     ? plan
                     : plan_for(Key{rows, n, k, false, bias != nullptr, alignment_of(w.w), 256});
      LOOM_CHECK(pc && pc->scale_after, "cuBLASLt FP8 GEMM plan for {} rows", rows);
      LOOM_CUBLAS_CHECK(cublasLtMatmul(lt_, pc->desc, &alpha, w.w, pc->a, xq + r0 * k, pc->b, &beta,
                                       prod, pc->d, prod, pc->d, &pc->algo, workspace_,
                                       workspace_bytes_, stream_));
      scale_fp8_product(prod, static_cast<uint16_t*>(out) + r0 * n, rows, n, xs + r0, w.scale, bias,
                        stream_);
    }
    stats_.cublaslt++;
    stats_.cublaslt_unit_scales++;
    return;
  }
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w.scale);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, xs);
  if (plan->fused_bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  LOOM_CUBLAS_CHECK(cublasLtMatmul(lt_, plan->desc, &alpha, w.w, plan->a, xq, plan->b, &beta, d,
                                   plan->d, d, plan->d, &plan->algo, workspace_, workspace_bytes_,
                                   stream_));
  if (bias && !plan->fused_bias) add_bias_rows(d, bias, mp, n, stream_);
  if (d != out)
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(out, d, static_cast<size_t>(m * n) * 2, cudaMemcpyDeviceToDevice, stream_));
  stats_.cublaslt++;
}

std::pair<uint8_t*, float*> Fp8Gemm::quantize_x(const void* x, int64_t m, int64_t mp,
                                                const Fp8WeightView& w) {
  const Fp8ActMode mode = act_mode(w);
  if (pre_.x == x && pre_.m == m && mp == m && pre_.k == w.k && pre_.mode == mode &&
      pre_.static_scale == (mode == Fp8ActMode::Static ? w.input_scale : nullptr)) {
    stats_.prequantized++;
    return {static_cast<uint8_t*>(xq_.data()), static_cast<float*>(x_scale_.data())};
  }
  pre_ = {};
  const int64_t groups = (w.k + 127) / 128;
  auto* xq = static_cast<uint8_t*>(xq_.ensure(static_cast<size_t>(mp * w.k), stream_));
  auto* xs = static_cast<float*>(
      x_scale_.ensure(static_cast<size_t>(mp * (w.block ? groups : 1)) * 4, stream_));
  quantize_fp8_rows(x, m, mp, w.k, mode, w.input_scale, xq, xs, mp, stream_);
  return {xq, xs};
}

std::optional<Fp8RowsOut> Fp8Gemm::prequantize(const void* x, int64_t m, const Fp8WeightView& w) {
  pre_ = {};
  const Fp8ActMode mode = act_mode(w);
  // run()'s choices of a kernel that quantises x itself (cuBLASLt may also
  // lack a plan for a shape, found only in run(): the rows are then unused).
  if (!prequantize_ || m <= 0 || mode == Fp8ActMode::Group || forced_ ||
      (small_m_ == 1 && m <= kFp8MatmulMaxRows) ||
      (stream_path_ && fp8_stream_matmul_supported(m, w.k, stream_cfg_)))
    return std::nullopt;
  Fp8RowsOut o;
  o.q = static_cast<uint8_t*>(xq_.ensure(static_cast<size_t>(m * w.k), stream_));
  o.scale = static_cast<float*>(x_scale_.ensure(static_cast<size_t>(m) * 4, stream_));
  o.static_scale = mode == Fp8ActMode::Static ? w.input_scale : nullptr;
  pre_ = {x, m, w.k, mode, o.static_scale};
  return o;
}

Fp8BlockGemmArgs Fp8Gemm::sm90_args(int64_t m, const Fp8WeightView& w, const void* bias,
                                    void* out) const {
  // Block scales: x's group scales M-major with rows padded to 4 (16-byte
  // TMA strides), as for cuBLASLt's 1x128 scaling; per-row weights: one
  // scale per row of x (per token or static).
  Fp8BlockGemmArgs a;
  a.row_scales = !w.block;
  a.small_tile_rows = small_tile_rows_;
  a.large_tile = large_tile_;
  a.fast_accum = fast_accum_ && !w.block;
  a.x_scale_ld = w.block ? round_up(m, 4) : m;
  a.m = m;
  a.w = w.w;
  a.w_scale = w.scale;
  a.w_scale_ld = w.scale_ld;
  a.n = w.n;
  a.k = w.k;
  a.bias = bias;
  a.out = out;
  return a;
}

bool Fp8Gemm::run_row_split(const void* x, int64_t m, const Fp8WeightView& w, const void* bias,
                            void* out) {
  Fp8BlockGemmArgs a = sm90_args(m, w, bias, out);
  a.row_split_splits = row_split_splits_;
  Fp8RowSplitPlan plan;
  if (!fp8_row_split_plan(a, plan)) return false;
  auto* partials =
      static_cast<float*>(split_partials_.ensure(std::max<size_t>(plan.partial_bytes, 4), stream_));
  auto* counters =
      static_cast<unsigned*>(split_counters_.ensure_zeroed(plan.counter_bytes, stream_));
  std::tie(a.xq, a.x_scale) = quantize_x(x, m, m, w);
  const char* err = fp8_row_split(a, plan, partials, counters, stream_);
  LOOM_CHECK(err == nullptr, "FP8 split-k kernel m {} n {} k {}: {}", m, w.n, w.k, err);
  stats_.row_split++;
  stats_.row_split_last_splits = plan.splits;
  stats_.row_split_last_tile_rows = plan.tile_rows;
  return true;
}

bool Fp8Gemm::run_cutlass(const void* x, int64_t m, const Fp8WeightView& w, const void* bias,
                          void* out) {
  Fp8BlockGemmArgs a = sm90_args(m, w, bias, out);
  if (!fp8_block_gemm_supported(a)) return false;
  const int64_t mp = a.x_scale_ld;  // rows padded for block scales
  std::tie(a.xq, a.x_scale) = quantize_x(x, m, mp, w);
  const char* err = fp8_block_gemm(a, workspace_, workspace_bytes_, stream_);
  LOOM_CHECK(err == nullptr, "CUTLASS FP8 {} GEMM m {} n {} k {}: {}",
             w.block ? "block-scaled" : "row-scaled", m, w.n, w.k, err);
  stats_.cutlass++;
  return true;
}

}  // namespace loom::cuda
