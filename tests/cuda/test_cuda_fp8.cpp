// FP8 E4M3 on the GPU against host references built from the same FP8
// values, so that only the kernels' arithmetic is measured (not quantisation
// error):
// 1. quantising a linear layer's input (per token, per 1x128 group, static)
//    and --quantization fp8's per-row weights: bit for bit the host
//    references of backend/linear.h;
// 2. FP8 linear layers (the small-m tensor-core kernel, cuBLASLt's FP8 GEMM,
//    CUTLASS's block-scaled FP8 GEMM on sm_90, and our kernel over tiles where
//    neither has an algorithm) with per-row,
//    per-tensor (+ static input scale) and 128x128 block scales, blocks ragged
//    at the N and K edges, bias: against sum_k dequant(xq) dequant(wq) in
//    double. Tolerance |got - want| <= 4e-3 |want| + 2^-12 sum_k |xq wq| +
//    1e-6: bf16 output rounding (2^-9), tensor-core partial sums of 128
//    products (DeepSeek-V3 measured ~14 bits on Hopper FP8), f32 sums;
// 3. a row's result does not depend on the other rows (small-m kernel and
//    CUTLASS's block-scaled GEMM on sm_90, bitwise) and stacked (fused) FP8
//    weights give the separate results;
// (The FP8 KV cache and the norms' and activation's FP8 output have their own
// files, test_cuda_fp8_kv.cpp and test_cuda_fp8_fused.cpp.)
// Each check prints its worst error relative to the tolerance (1.0 = limit),
// and where cuBLASLt offered no FP8 algorithm.
#include <cstdio>
#include <map>
#include <set>

#include "attention_scenario.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/kernels.h"
#include "core/fp8.h"
#include "fp8_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

// sum_k dequant(xq) dequant(wq) (+ bias) per output, and sum_k |xq wq|.
void reference(const LinearWeight& w, const std::vector<float>& x, int64_t m,
               const std::vector<float>* bias, std::vector<double>& want,
               std::vector<double>& abs_sum) {
  const int64_t n = w.rows(), k = w.cols();
  const Fp8Activations a = quantize_fp8_activations(x.data(), m, k, w);
  const auto* wq = w.weight.data_as<const uint8_t>();
  want.assign(static_cast<size_t>(m * n), 0.0);
  abs_sum.assign(static_cast<size_t>(m * n), 0.0);
  std::vector<double> xd(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c)
      xd[i * k + c] = double(fp8_e4m3_to_f32(a.q[i * k + c])) * fp8_activation_scale(a, w, i, c);
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> wd(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c)
      wd[c] = double(fp8_e4m3_to_f32(wq[j * k + c])) * fp8_weight_scale(w, j, c);
    for (int64_t i = 0; i < m; ++i) {
      double s = 0, t = 0;
      for (int64_t c = 0; c < k; ++c) {
        s += xd[i * k + c] * wd[c];
        t += std::fabs(xd[i * k + c] * wd[c]);
      }
      want[i * n + j] = s + (bias ? (*bias)[j] : 0.0);
      abs_sum[i * n + j] = t;
    }
  }
}

// Worst |got - want| / tolerance; reports up to 5 failures.
double check_linear(const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<double>& abs_sum, const std::string& what) {
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 4e-3 * std::fabs(want[i]) + std::ldexp(abs_sum[i], -12) + 1e-6;
    const double r = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]) / tol;
    worst = std::max(worst, r);
    if (!(r <= 1.0) && bad++ < 5)
      ADD_FAILURE() << what << " [" << i << "] got " << got[i] << " want " << want[i];
  }
  return worst;
}

TEST_F(CudaFp8Test, QuantizeActivationsMatchesHost) {
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic, Scheme::Block})
    for (auto [m, k] :
         {std::pair<int64_t, int64_t>{1, 64}, {3, 320}, {17, 4096}, {2, 14336}, {5, 144}}) {
      SCOPED_TRACE(::testing::Message() << scheme_name(scheme) << " m " << m << " k " << k);
      const LinearWeight w = make_weight(scheme, 16, k, 7);
      const auto x =
          random_bf16_values(static_cast<size_t>(m * k), 11 + static_cast<uint32_t>(m), -2, 2);
      const int64_t mp = (m + 3) / 4 * 4, groups = (k + 127) / 128;
      const bool group = scheme == Scheme::Block;
      Tensor xq = gpu_->alloc(DType::F8_E4M3, {mp, k});
      Tensor xs = gpu_->alloc(DType::F32, {group ? groups * mp : mp});
      Tensor in_scale = gpu_f32(
          *gpu_, {scheme == Scheme::TensorStatic ? w.input_scale.data_as<float>()[0] : 0.0f}, {1});
      const cuda::Fp8ActMode mode = group                       ? cuda::Fp8ActMode::Group
                                    : scheme == Scheme::Channel ? cuda::Fp8ActMode::Token
                                                                : cuda::Fp8ActMode::Static;
      cuda::quantize_fp8_rows(gpu_bf16(*gpu_, x, {m, k}).data(), m, mp, k, mode,
                              in_scale.data_as<float>(), xq.data_as<uint8_t>(), xs.data_as<float>(),
                              mp, stream_);
      std::vector<uint8_t> q(static_cast<size_t>(mp * k));
      std::vector<float> s(static_cast<size_t>(xs.numel()));
      gpu_->copy_to_host(q.data(), xq, q.size());
      gpu_->copy_to_host(s.data(), xs, s.size() * 4);
      const Fp8Activations want = quantize_fp8_activations(x.data(), m, k, w);
      int bad = 0;
      for (int64_t i = 0; i < m * k && bad < 5; ++i)
        if (q[i] != want.q[i]) {
          ADD_FAILURE() << "q[" << i << "] " << int(q[i]) << " != " << int(want.q[i]);
          ++bad;
        }
      for (int64_t i = m * k; i < mp * k; ++i) ASSERT_EQ(q[i], 0) << "padding row byte " << i;
      for (int64_t r = 0; r < m; ++r) {
        if (group) {
          for (int64_t g = 0; g < groups; ++g)
            EXPECT_EQ(s[g * mp + r], want.scale[r * groups + g]) << "row " << r << " group " << g;
        } else {
          EXPECT_EQ(s[r], want.scale[scheme == Scheme::Channel ? r : 0]) << "row " << r;
        }
      }
    }
}

TEST_F(CudaFp8Test, QuantizeWeightsAtLoadMatchesHost) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{70, 96}, {257, 4096}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " [" << n << ", " << k << "]");
      const auto w =
          random_bf16_values(static_cast<size_t>(n * k), 3 + static_cast<uint32_t>(n), -3, 3);
      Tensor host = Tensor::cpu(t, {n, k});
      for (size_t i = 0; i < w.size(); ++i) {
        if (t == DType::F32) host.data_as<float>()[i] = w[i];
        if (t == DType::BF16) host.data_as<uint16_t>()[i] = f32_to_bf16(w[i]);
        if (t == DType::F16) host.data_as<uint16_t>()[i] = f32_to_f16(w[i]);
      }
      LinearWeight plain;
      plain.weight = host;
      plain.quantize = true;
      const LinearWeight got = gpu_->prepare_linear(plain);
      ASSERT_TRUE(got.fp8());
      ASSERT_EQ(got.scale_kind, Fp8WeightScale::Channel);
      const LinearWeight want = quantize_fp8_per_channel(host);
      std::vector<uint8_t> q(static_cast<size_t>(n * k));
      std::vector<float> s(static_cast<size_t>(n));
      gpu_->copy_to_host(q.data(), got.weight, q.size());
      gpu_->copy_to_host(s.data(), got.scale, s.size() * 4);
      EXPECT_EQ(0, std::memcmp(q.data(), want.weight.data(), q.size())) << "weight bytes differ";
      for (int64_t r = 0; r < n; ++r)
        EXPECT_EQ(s[r], want.scale.data_as<float>()[r]) << "row " << r;
    }
}

// The prepared weight as Fp8Gemm reads it.
cuda::Fp8WeightView view_of(const LinearWeight& w) {
  cuda::Fp8WeightView v;
  v.w = w.weight.data_as<const uint8_t>();
  v.n = w.rows();
  v.k = w.cols();
  v.scale = w.scale.data_as<const float>();
  v.scale_ld = w.scale_ld;
  v.block = w.scale_kind == Fp8WeightScale::Block;
  v.activation = w.activation;
  v.input_scale =
      w.activation == Fp8Activation::Static ? w.input_scale.data_as<const float>() : nullptr;
  return v;
}

// Why the sm_90a FP8 kernels (CUTLASS's GEMMs, the split-k kernel) cannot run here, or null.
const char* no_cutlass_here() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (!cuda::fp8_block_gemm_built()) return "this build has no CUTLASS FP8 GEMM";
  if (major * 10 + minor != 90) return "CUTLASS FP8 GEMM: sm_90 only";
  return nullptr;
}

TEST_F(CudaFp8Test, LinearMatchesReferenceOnEveryPath) {
  cuda::Fp8Gemm gemm(stream_);
  using Path = cuda::Fp8Gemm::Path;
  const std::pair<int64_t, int64_t> shapes[] = {{16, 32},    {64, 64},     {200, 320},  {130, 144},
                                                {1000, 512}, {4096, 4096}, {6144, 4096}};
  std::map<std::string, double> worst;  // by scheme and path
  std::set<std::string> no_algorithm;
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic, Scheme::Block})
    for (auto [n, k] : shapes) {
      const LinearWeight host = make_weight(scheme, n, k, 5 + static_cast<uint32_t>(n + k));
      const LinearWeight w = gpu_->prepare_linear(host);
      for (int64_t m : {1, 2, 3, 5, 8, 9, 16, 64, 200}) {
        if (n * k > 1000 * 512 && m > 16 && m != 64) continue;  // keep the host reference quick
        const auto x = random_bf16_values(static_cast<size_t>(m * k),
                                          13 + static_cast<uint32_t>(m * n), -2, 2);
        const auto b = random_bf16_values(static_cast<size_t>(n), 17, -1, 1);
        for (bool with_bias : {false, true}) {
          if (with_bias && (m > 9 || n > 1000)) continue;
          std::vector<double> want, abs_sum;
          reference(host, x, m, with_bias ? &b : nullptr, want, abs_sum);
          Tensor gb = gpu_bf16(*gpu_, b, {n});
          for (Path path : {Path::SmallM, Path::CublasLt, Path::Stream, Path::RowSplit}) {
            if (path == Path::Stream && !cuda::fp8_stream_matmul_supported(m, k, {})) continue;
            if (path == Path::RowSplit && (no_cutlass_here() || scheme == Scheme::Block ||
                                           m > cuda::kFp8RowSplitMaxRows || k % 128 != 0))
              continue;
            const char* path_name = path == Path::SmallM     ? " kernel"
                                    : path == Path::Stream   ? " stream"
                                    : path == Path::RowSplit ? " split-k"
                                                             : " cublaslt";
            std::ostringstream what;
            what << scheme_name(scheme) << " m " << m << " n " << n << " k " << k
                 << (with_bias ? " bias" : "") << path_name;
            Tensor out = gpu_->alloc(DType::BF16, {m, n});
            gemm.force_path(path);
            try {
              gemm.run(gpu_bf16(*gpu_, x, {m, k}).data(), m, view_of(w),
                       with_bias ? gb.data() : nullptr, out.data());
            } catch (const Error& e) {
              // cuBLASLt may have no FP8 algorithm for a shape: then linear() uses the kernel.
              no_algorithm.insert(std::string(scheme_name(scheme)) + " n " + std::to_string(n) +
                                  " k " + std::to_string(k) + (with_bias ? " bias" : ""));
              continue;
            }
            const double r = check_linear(from_gpu_bf16(*gpu_, out), want, abs_sum, what.str());
            double& w = worst[std::string(scheme_name(scheme)) + path_name];
            w = std::max(w, r);
          }
        }
      }
    }
  for (const auto& [what, w] : worst)
    std::printf("  fp8 linear %-32s worst err/tol %.3f\n", what.c_str(), w);
  for (const auto& what : no_algorithm)
    std::printf("  fp8 linear: cuBLASLt has no FP8 GEMM for %s\n", what.c_str());
  EXPECT_GT(gemm.stats().stream, 0u);
  std::printf(
      "  fp8 gemm calls: %llu kernel, %llu stream, %llu split-k, %llu cublaslt (%llu with unit "
      "scales), %llu tiled\n",
      static_cast<unsigned long long>(gemm.stats().small_m),
      static_cast<unsigned long long>(gemm.stats().stream),
      static_cast<unsigned long long>(gemm.stats().row_split),
      static_cast<unsigned long long>(gemm.stats().cublaslt),
      static_cast<unsigned long long>(gemm.stats().cublaslt_unit_scales),
      static_cast<unsigned long long>(gemm.stats().tiled));
  // The backend's own choice, through Backend::linear.
  const LinearWeight host = make_weight(Scheme::Block, 200, 320, 3);
  const LinearWeight w = gpu_->prepare_linear(host);
  for (int64_t m : {1, 7, 33}) {
    const auto x = random_bf16_values(static_cast<size_t>(m * 320), 19, -2, 2);
    Tensor out = gpu_->alloc(DType::BF16, {m, 200});
    gpu_->linear(gpu_bf16(*gpu_, x, {m, 320}), w, nullptr, out);
    std::vector<double> want, abs_sum;
    reference(host, x, m, nullptr, want, abs_sum);
    check_linear(from_gpu_bf16(*gpu_, out), want, abs_sum,
                 "Backend::linear m " + std::to_string(m));
  }
}

// A row's output does not depend on the rows beside it (the small-m kernel:
// bitwise); stacked weights give what the parts give (bitwise, same kernel).
TEST_F(CudaFp8Test, RowsIndependentAndStackingExact) {
  for (Scheme scheme : {Scheme::Channel, Scheme::Block}) {
    SCOPED_TRACE(scheme_name(scheme));
    const int64_t k = 1024;
    const LinearWeight q = gpu_->prepare_linear(make_weight(scheme, 256, k, 1));
    const LinearWeight kk = gpu_->prepare_linear(make_weight(scheme, 128, k, 2));
    const LinearWeight v = gpu_->prepare_linear(make_weight(scheme, 100, k, 3));
    const std::optional<LinearWeight> qkv = gpu_->stack_linear({&q, &kk, &v});
    ASSERT_TRUE(qkv.has_value());
    EXPECT_EQ(qkv->rows(), 484);
    const int64_t m = 8;
    const auto x = random_bf16_values(static_cast<size_t>(m * k), 4, -2, 2);
    Tensor gx = gpu_bf16(*gpu_, x, {m, k});
    Tensor all = gpu_->alloc(DType::BF16, {m, 484});
    gpu_->linear(gx, *qkv, nullptr, all);
    const auto rows = from_gpu_bf16(*gpu_, all);
    int64_t col = 0;
    for (const LinearWeight* part : {&q, &kk, &v}) {
      Tensor o = gpu_->alloc(DType::BF16, {m, part->rows()});
      gpu_->linear(gx, *part, nullptr, o);
      const auto got = from_gpu_bf16(*gpu_, o);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < part->rows(); ++j)
          ASSERT_EQ(got[i * part->rows() + j], rows[i * 484 + col + j])
              << "row " << i << " col " << col + j;
      col += part->rows();
    }
    for (int64_t i = 0; i < m; ++i) {
      Tensor one = gpu_->alloc(DType::BF16, {1, 484});
      gpu_->linear(
          gpu_bf16(*gpu_, std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), {1, k}),
          *qkv, nullptr, one);
      EXPECT_EQ(from_gpu_bf16(*gpu_, one),
                std::vector<float>(rows.begin() + i * 484, rows.begin() + (i + 1) * 484))
          << "row " << i;
    }
    // Block scales stack only when every part but the last fills whole 128-row blocks.
    if (scheme == Scheme::Block) {
      EXPECT_FALSE(gpu_->stack_linear({&v, &q}).has_value());
    }
  }
}

// Rows `rows` of x [m, k] as their own matrix.
std::vector<float> rows_of(const std::vector<float>& x, int64_t k,
                           const std::vector<int64_t>& rows) {
  std::vector<float> out;
  for (int64_t r : rows) out.insert(out.end(), x.begin() + r * k, x.begin() + (r + 1) * k);
  return out;
}

// Rows `rows` of x [m, k] through gemm with the weight w [n, k]: their
// outputs [rows.size(), n], on the host.
std::vector<float> run_rows(Backend& be, cuda::Fp8Gemm& gemm, const LinearWeight& w,
                            const std::vector<float>& x, int64_t k,
                            const std::vector<int64_t>& rows, const void* bias = nullptr) {
  const auto rm = static_cast<int64_t>(rows.size());
  Tensor out = be.alloc(DType::BF16, {rm, w.rows()});
  gemm.run(gpu_bf16(be, rows_of(x, k, rows), {rm, k}).data(), rm, view_of(w), bias, out.data());
  return from_gpu_bf16(be, out);
}

// The small-m kernel's two ways to a row's activation scale (one or two
// rows: each CUDA block reduces the row itself; more: a pass of partial
// maxima first) give the same scale, so a row comes out bit for bit the same
// alone, in pairs or among 8. k spans several partial-maxima pieces and ends
// mid-group. The same for the streaming kernel's one or two rows.
TEST_F(CudaFp8Test, SmallMRowScalesAgreeAcrossBatchSizes) {
  cuda::Fp8Gemm gemm(stream_);
  gemm.force_path(cuda::Fp8Gemm::Path::SmallM);
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic, Scheme::Block}) {
    SCOPED_TRACE(scheme_name(scheme));
    const int64_t n = 200, k = 4096 + 2 * 2048 + 80, m = 8;
    const LinearWeight w = gpu_->prepare_linear(make_weight(scheme, n, k, 9));
    auto x = random_bf16_values(static_cast<size_t>(m * k), 21, -2, 2);
    x[3 * k + k - 5] = 7.5f;  // row 3's amax in the last, partial group
    const auto run = [&](const std::vector<int64_t>& rows) {
      return run_rows(*gpu_, gemm, w, x, k, rows);
    };
    std::vector<int64_t> all(m);
    for (int64_t i = 0; i < m; ++i) all[i] = i;
    const auto want = run(all);
    for (const std::vector<int64_t>& rows :
         {std::vector<int64_t>{3}, {0}, {7}, {3, 5}, {6, 1}, {2, 3, 4}}) {
      const auto got = run(rows);
      for (size_t r = 0; r < rows.size(); ++r)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[r * n + j], want[rows[r] * n + j])
              << "row " << rows[r] << " of " << rows.size() << ", column " << j;
    }
    // The streaming kernel (one or two rows): a row alone or beside another
    // comes out the same, and close to the small-m kernel's.
    gemm.force_path(cuda::Fp8Gemm::Path::Stream);
    const auto pair = run({3, 6});
    for (int64_t r : {3, 6}) {
      const auto one = run({r});
      const size_t at = r == 3 ? 0 : 1;
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(one[j], pair[at * n + j]) << "stream: row " << r << ", column " << j;
        EXPECT_NEAR(one[j], want[r * n + j], 0.02 * std::fabs(want[r * n + j]) + 0.05)
            << "stream vs small-m: row " << r << ", column " << j;
      }
    }
    gemm.force_path(cuda::Fp8Gemm::Path::SmallM);
  }
}

// The small-m kernel against the batch paths (cuBLASLt; CUTLASS for 128x128
// blocks) on the same rows: both close to the exact sums, but not bit for
// bit. The kernel sums 128 products at a time in f16 HMMAs, Hopper's FP8
// wgmma keeps fewer bits (H100: ~6% of the bf16 outputs one unit apart, the
// kernel's mean error a little lower), which is why per-row and per-tensor
// weights take cuBLASLt at every m unless LOOM_FP8_SMALL_M=1: a request
// alone (1-8 rows) and in a batch would otherwise part at near-ties.
// Prints the share that differ and each path's mean error against the
// double reference; a wrong scale or lost group would make most differ.
TEST_F(CudaFp8Test, SmallMAndBatchPathsAgree) {
  using Path = cuda::Fp8Gemm::Path;
  cuda::Fp8Gemm gemm(stream_);
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic, Scheme::Block})
    for (int64_t k : {int64_t{896}, int64_t{4096}}) {
      const int64_t n = 1024, m = 4;
      const LinearWeight host = make_weight(scheme, n, k, 31);
      const LinearWeight w = gpu_->prepare_linear(host);
      auto x = random_bf16_values(static_cast<size_t>(m * k), 37, -2, 2);
      std::vector<double> want, abs_sum;
      reference(host, x, m, nullptr, want, abs_sum);
      std::vector<int64_t> rows(m);
      for (int64_t i = 0; i < m; ++i) rows[i] = i;
      gemm.force_path(Path::SmallM);
      const auto small = run_rows(*gpu_, gemm, w, x, k, rows);
      bool cutlass = scheme == Scheme::Block;
      std::vector<float> batch;
      if (cutlass) try {
          gemm.force_path(Path::Cutlass);
          batch = run_rows(*gpu_, gemm, w, x, k, rows);
        } catch (const Error&) {
          cutlass = false;  // not built for sm_90a, or not this device
        }
      if (!cutlass) {
        gemm.force_path(Path::CublasLt);
        batch = run_rows(*gpu_, gemm, w, x, k, rows);
      }
      size_t differ = 0;
      double err_small = 0, err_batch = 0, worst_rel = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (small[i] != batch[i]) ++differ;
        err_small += std::fabs(small[i] - want[i]);
        err_batch += std::fabs(batch[i] - want[i]);
        worst_rel = std::max(
            worst_rel, std::fabs(double(small[i]) - batch[i]) / std::max(1e-6, std::fabs(want[i])));
      }
      std::printf(
          "  %-18s k %5lld small-m vs %s: %5.2f%% of outputs differ (worst %.2e relative); mean "
          "|err| small-m %.3e, batch %.3e\n",
          scheme_name(scheme), static_cast<long long>(k), cutlass ? "cutlass " : "cublaslt",
          100.0 * double(differ) / double(want.size()), worst_rel, err_small / double(want.size()),
          err_batch / double(want.size()));
      EXPECT_LE(differ, want.size() / 8) << scheme_name(scheme) << " k " << k;
      EXPECT_LE(err_small, 1.05 * err_batch) << scheme_name(scheme) << " k " << k;
      EXPECT_LE(err_batch, 1.05 * err_small) << scheme_name(scheme) << " k " << k;
    }
}

// The streaming kernel's shapes (LOOM_FP8_STREAM_CHUNK bytes of k per stage,
// LOOM_FP8_STREAM_BLOCKS blocks per SM) change only the order of its sums:
// each agrees with the small-m kernel, and a row alone with the row paired.
TEST_F(CudaFp8Test, StreamConfigsAgree) {
  const int64_t n = 300, k = 3 * 4096 + 208;
  for (Scheme scheme : {Scheme::Channel, Scheme::Block}) {
    const LinearWeight w = gpu_->prepare_linear(make_weight(scheme, n, k, 12));
    const auto x = random_bf16_values(static_cast<size_t>(2 * k), 23, -2, 2);
    const auto run = [&](cuda::Fp8Gemm& gemm, const std::vector<int64_t>& rows) {
      return run_rows(*gpu_, gemm, w, x, k, rows);
    };
    cuda::Fp8Gemm small(stream_);
    small.force_path(cuda::Fp8Gemm::Path::SmallM);
    const auto want = run(small, {0, 1});
    for (auto [chunk, blocks] : {std::pair{128, 1}, {512, 2}, {1024, 2}, {2048, 1}}) {
      SCOPED_TRACE(::testing::Message()
                   << scheme_name(scheme) << " chunk " << chunk << " blocks " << blocks);
      ::setenv("LOOM_FP8_STREAM_CHUNK", std::to_string(chunk).c_str(), 1);
      ::setenv("LOOM_FP8_STREAM_BLOCKS", std::to_string(blocks).c_str(), 1);
      cuda::Fp8Gemm gemm(stream_);
      ::unsetenv("LOOM_FP8_STREAM_CHUNK");
      ::unsetenv("LOOM_FP8_STREAM_BLOCKS");
      ASSERT_TRUE(cuda::fp8_stream_matmul_supported(2, k, {chunk, blocks}));
      gemm.force_path(cuda::Fp8Gemm::Path::Stream);
      const auto pair = run(gemm, {0, 1});
      for (int64_t r : {0, 1}) {
        const auto one = run(gemm, {r});
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(one[j], pair[r * n + j]) << "row " << r << ", column " << j;
          ASSERT_NEAR(one[j], want[r * n + j], 0.02 * std::fabs(want[r * n + j]) + 0.05)
              << "row " << r << ", column " << j;
        }
      }
      EXPECT_EQ(gemm.stats().stream, 3u);
    }
  }
  EXPECT_FALSE(cuda::fp8_stream_matmul_supported(1, k, {100, 1}));
  EXPECT_FALSE(cuda::fp8_stream_matmul_supported(1, k, {1024, 5}));
  EXPECT_FALSE(cuda::fp8_stream_matmul_supported(1, k, {8192, 1}));
  EXPECT_FALSE(cuda::fp8_stream_matmul_supported(2, k, {4096, 1}));  // four stages do not fit
  EXPECT_FALSE(cuda::fp8_stream_matmul_supported(3, k, {}));
}

TEST_F(CudaFp8Test, RejectsBadShapes) {
  const LinearWeight w = gpu_->prepare_linear(make_weight(Scheme::Channel, 32, 64, 1));
  Tensor x = gpu_->alloc(DType::BF16, {2, 48}), out = gpu_->alloc(DType::BF16, {2, 32});
  EXPECT_THROW(gpu_->linear(x, w, nullptr, out), Error);
  Tensor x2 = gpu_->alloc(DType::BF16, {2, 64}), out2 = gpu_->alloc(DType::BF16, {2, 33});
  EXPECT_THROW(gpu_->linear(x2, w, nullptr, out2), Error);
  LinearWeight host = make_weight(Scheme::Channel, 32, 64, 1);
  host.scale = cpu_f32(std::vector<float>(31, 1.0f), {31});
  EXPECT_THROW(gpu_->prepare_linear(host), Error);
}

// --- CUTLASS's block-scaled FP8 GEMM (sm_90) ---

// CUTLASS's GEMM with per-row scales (per-channel and per-tensor weights;
// per-token and static activations), forced at every m including decode's
// 1-8 rows: against the reference, and a row's bits the same at every m, on
// either side of the switch from 64-row to 128-row tiles (so that a request
// alone and in any batch agree).
TEST_F(CudaFp8Test, CutlassRowGemmMatchesReference) {
  using Path = cuda::Fp8Gemm::Path;
  if (const char* why = no_cutlass_here()) GTEST_SKIP() << why;
  cuda::Fp8Gemm gemm(stream_);
  gemm.force_path(Path::Cutlass);
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096}, {1024, 896}, {200, 272}}) {
      SCOPED_TRACE(scheme_name(scheme));
      const LinearWeight host = make_weight(scheme, n, k, 51);
      const LinearWeight w = gpu_->prepare_linear(host);
      const auto b = random_bf16_values(static_cast<size_t>(n), 53, -1, 1);
      Tensor gb = gpu_bf16(*gpu_, b, {n});
      double worst = 0;
      std::map<int64_t, std::vector<float>> results;  // m -> out
      for (int64_t m : {1, 2, 8, 9, 64, 65, 128, 300}) {
        const auto x = random_bf16_values(static_cast<size_t>(m * k), 57, -2, 2);  // prefixes agree
        const bool with_bias = n != 6144;
        std::ostringstream what;
        what << scheme_name(scheme) << " cutlass rows m " << m << " n " << n << " k " << k;
        Tensor out = gpu_->alloc(DType::BF16, {m, n});
        gemm.run(gpu_bf16(*gpu_, x, {m, k}).data(), m, view_of(w), with_bias ? gb.data() : nullptr,
                 out.data());
        const auto got = from_gpu_bf16(*gpu_, out);
        const int64_t checked = std::min<int64_t>(m, 16);  // keep the host reference quick
        std::vector<double> want, abs_sum;
        reference(host, std::vector<float>(x.begin(), x.begin() + checked * k), checked,
                  with_bias ? &b : nullptr, want, abs_sum);
        worst =
            std::max(worst, check_linear(std::vector<float>(got.begin(), got.begin() + checked * n),
                                         want, abs_sum, what.str()));
        results[m] = got;
      }
      std::printf("  fp8 linear %-18s n %5lld cutlass rows worst err/tol %.3f\n",
                  scheme_name(scheme), static_cast<long long>(n), worst);
      const auto& all = results[300];
      for (int64_t m : {1, 2, 8, 9, 64, 65, 128})
        EXPECT_TRUE(std::equal(results[m].begin(), results[m].end(), all.begin()))
            << "m " << m << ": rows differ from the same rows in m 300";
    }
  // n not a multiple of 8 (rows of out not 16-byte aligned for the TMA): forcing it throws.
  const LinearWeight w2 = gpu_->prepare_linear(make_weight(Scheme::Channel, 203, 256, 59));
  Tensor out = gpu_->alloc(DType::BF16, {4, 203});
  EXPECT_THROW(gemm.run(gpu_bf16(*gpu_, random_bf16_values(4 * 256, 61, -2, 2), {4, 256}).data(), 4,
                        view_of(w2), nullptr, out.data()),
               Error);
  EXPECT_GT(gemm.stats().cutlass, 0u);
}

// The row-scaled GEMM comparisons' cases: per scheme (per-tensor on the
// n 1024 shapes only) and shape, the weight (host and prepared) and a bias
// on the n 1024 shapes (as QKV projections have); per m, m random rows of x,
// their indices and `reference` of the first few (two on the large shapes).
// Outputs that differ between a and b (same size).
size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

struct RowGemmCase {
  Scheme scheme;
  int64_t n, k, m;
  const LinearWeight *host, *w;
  const void* bias;  // on the GPU, or null
  std::vector<float> x;
  std::vector<int64_t> rows;
  std::vector<double> want, abs_sum;
  // sum |got - want| over the reference's rows.
  double abs_err(const std::vector<float>& got) const {
    double e = 0;
    for (size_t i = 0; i < want.size(); ++i) e += std::fabs(got[i] - want[i]);
    return e;
  }
  std::string what() const {
    std::ostringstream o;
    o << scheme_name(scheme) << " n " << n << " k " << k << " m " << m << (bias ? " bias" : "");
    return o.str();
  }
};
template <class Fn>
void for_each_row_gemm_case(Backend& gpu, const std::vector<std::pair<int64_t, int64_t>>& shapes,
                            std::initializer_list<int64_t> ms, uint32_t seed, Fn&& fn) {
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic})
    for (auto [n, k] : shapes) {
      if (scheme == Scheme::TensorStatic && n > 1024) continue;  // per-channel covers the shapes
      const LinearWeight host = make_weight(scheme, n, k, seed);
      const LinearWeight w = gpu.prepare_linear(host);
      const auto b = random_bf16_values(static_cast<size_t>(n), seed + 6, -1, 1);
      Tensor gb = gpu_bf16(gpu, b, {n});
      const bool with_bias = n == 1024;
      for (int64_t m : ms) {
        RowGemmCase c{scheme, n, k, m, &host, &w, with_bias ? gb.data() : nullptr, {}, {}, {}, {}};
        c.x = random_bf16_values(static_cast<size_t>(m * k), seed + 2, -2, 2);
        c.rows.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) c.rows[static_cast<size_t>(i)] = i;
        const int64_t checked = std::min<int64_t>(m, n * k > (int64_t{8} << 20) ? 2 : 16);
        reference(host, std::vector<float>(c.x.begin(), c.x.begin() + checked * k), checked,
                  with_bias ? &b : nullptr, c.want, c.abs_sum);
        if (!fn(c)) return;
      }
    }
}

// cuBLASLt (FP8 GEMM with unit scales into f32, then the scaling pass) and
// CUTLASS's row-scaled GEMM (scales in its epilogue) on the same rows, per-row
// and per-tensor weights, the 8B model's shapes among them, at decode and
// prefill row counts. Both scale the same way, fma(x_scale * w_scale, sum,
// bias), and both sum k 128 columns at a time in order, so with cuBLASLt kept
// to algorithms without split-K the rows are the same bits (what lets the two
// share a model's products by row count and keep batch invariance); with
// split-K allowed, the share that differs is printed and bounded. Each one's
// mean error against the double reference is printed; a lost scale or group
// would make most differ.
TEST_F(CudaFp8Test, CublasLtAndCutlassRowGemmsAgree) {
  using Path = cuda::Fp8Gemm::Path;
  if (const char* why = no_cutlass_here()) GTEST_SKIP() << why;
  cuda::Fp8Gemm any(stream_), one_pass(stream_), cutlass(stream_);
  any.force_path(Path::CublasLt);
  one_pass.force_path(Path::CublasLt);
  one_pass.allow_cublaslt_split_k(false);
  cutlass.force_path(Path::Cutlass);
  bool pass_scales = true;  // cuBLASLt leaves the scales to the pass
  for_each_row_gemm_case(
      *gpu_, {{1024, 896}, {1024, 4096}, {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}},
      {1, 2, 8, 13, 64, 300}, 41, [&](const RowGemmCase& c) {
        const uint64_t unit_before = one_pass.stats().cublaslt_unit_scales;
        const auto lt = run_rows(*gpu_, any, *c.w, c.x, c.k, c.rows, c.bias);
        const auto lt1 = run_rows(*gpu_, one_pass, *c.w, c.x, c.k, c.rows, c.bias);
        const auto cut = run_rows(*gpu_, cutlass, *c.w, c.x, c.k, c.rows, c.bias);
        // Same bits only where cuBLASLt leaves the scales to the pass.
        if (one_pass.stats().cublaslt_unit_scales == unit_before) return pass_scales = false;
        const size_t differ = differing(lt, cut), differ1 = differing(lt1, cut);
        const double err_lt = c.abs_err(lt), err_cut = c.abs_err(cut);
        std::printf(
            "  %-40s cutlass rows vs cublaslt: %5.2f%% of outputs differ, without split-K "
            "%5.2f%%; mean |err| %.3e, %.3e\n",
            c.what().c_str(), 100.0 * double(differ) / double(lt.size()),
            100.0 * double(differ1) / double(lt.size()), err_lt / double(c.want.size()),
            err_cut / double(c.want.size()));
        EXPECT_EQ(differ1, 0u) << c.what();
        EXPECT_LE(differ, lt.size() / 8) << c.what();
        EXPECT_LE(err_lt, 1.1 * err_cut) << c.what();
        EXPECT_LE(err_cut, 1.1 * err_lt) << c.what();
        return true;
      });
  if (!pass_scales) GTEST_SKIP() << "cuBLASLt scales per row itself here: its rounding is its own";
}

// Fast accumulation (Fp8Gemm::set_fast_accum: all of k in the tensor
// core's accumulator, cuBLASLt's FAST_ACCUM and CUTLASS's FP8FastAccum
// schedules): cuBLASLt without split-K and CUTLASS give the same bits (so the
// two can still share a model's products by row count), and the error
// against the double reference stays within 2x of the promoted sums' (mean)
// and within the reference tolerance with 4x its accumulation term (worst).
// Prints the share of outputs differing from the promoted products.
TEST_F(CudaFp8Test, FastAccumulationRowGemmsAgree) {
  using Path = cuda::Fp8Gemm::Path;
  if (const char* why = no_cutlass_here()) GTEST_SKIP() << why;
  cuda::Fp8Gemm lt(stream_), cutlass(stream_), promoted(stream_);
  lt.force_path(Path::CublasLt);
  lt.allow_cublaslt_split_k(false);
  lt.set_fast_accum(true);
  cutlass.force_path(Path::Cutlass);
  cutlass.set_fast_accum(true);
  promoted.force_path(Path::Cutlass);
  bool pass_scales = true;
  for_each_row_gemm_case(
      *gpu_, {{1024, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}}, {1, 8, 64, 300}, 51,
      [&](const RowGemmCase& c) {
        const uint64_t unit_before = lt.stats().cublaslt_unit_scales;
        const auto fast_lt = run_rows(*gpu_, lt, *c.w, c.x, c.k, c.rows, c.bias);
        const auto fast_cut = run_rows(*gpu_, cutlass, *c.w, c.x, c.k, c.rows, c.bias);
        const auto slow = run_rows(*gpu_, promoted, *c.w, c.x, c.k, c.rows, c.bias);
        if (lt.stats().cublaslt_unit_scales == unit_before) return pass_scales = false;
        const size_t differ = differing(fast_lt, fast_cut),
                     from_promoted = differing(fast_cut, slow);
        const double err_fast = c.abs_err(fast_cut), err_slow = c.abs_err(slow);
        double worst = 0;
        for (size_t i = 0; i < c.want.size(); ++i) {
          const double tol = 4e-3 * std::fabs(c.want[i]) + std::ldexp(c.abs_sum[i], -10) + 1e-6;
          worst = std::max(worst, std::fabs(fast_cut[i] - c.want[i]) / tol);
        }
        std::printf(
            "  fast accumulation %-40s cublaslt vs cutlass differ %5.2f%%, vs promoted %5.2f%%; "
            "mean |err| %.3e (promoted %.3e), worst err/tol %.3f\n",
            c.what().c_str(), 100.0 * double(differ) / double(fast_lt.size()),
            100.0 * double(from_promoted) / double(fast_lt.size()),
            err_fast / double(c.want.size()), err_slow / double(c.want.size()), worst);
        EXPECT_EQ(differ, 0u) << c.what();
        EXPECT_LE(err_fast, 2.0 * err_slow + 1e-6 * double(c.want.size())) << c.what();
        EXPECT_LE(worst, 1.0) << c.what();
        return true;
      });
  if (!pass_scales) GTEST_SKIP() << "cuBLASLt scales per row itself here: its rounding is its own";
}

// The split-k kernel for few rows against CUTLASS's row-scaled GEMM: the
// same bits (the same 128-column group sums, added in k's order, the same
// epilogue) at its own choice of split and at forced splits (one block per
// tile, uneven runs, one group per block), with its 8-row and 16-row tiles of
// x, a ragged last 64-row tile of w (n 200) and the 8B shapes, with and
// without bias.
TEST_F(CudaFp8Test, RowSplitKernelMatchesCutlass) {
  using Path = cuda::Fp8Gemm::Path;
  if (const char* why = no_cutlass_here()) GTEST_SKIP() << why;
  cuda::Fp8Gemm cutlass(stream_), split(stream_);
  cutlass.force_path(Path::Cutlass);
  split.force_path(Path::RowSplit);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {200, 896}, {1024, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}};
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic})
    for (auto [n, k] : shapes) {
      if (scheme == Scheme::TensorStatic && n > 1024) continue;
      const LinearWeight w = gpu_->prepare_linear(make_weight(scheme, n, k, 53));
      const auto b = random_bf16_values(static_cast<size_t>(n), 59, -1, 1);
      Tensor gb = gpu_bf16(*gpu_, b, {n});
      const int64_t groups = k / 128;
      for (int64_t m : {1, 2, 5, 8, 9, 16}) {
        if (n * k > (int64_t{16} << 20) && m != 1 && m != 16)
          continue;  // the large ones: both tiles
        const auto x = random_bf16_values(static_cast<size_t>(m * k), 61, -2, 2);
        std::vector<int64_t> rows(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = i;
        for (const void* bias :
             {static_cast<const void*>(nullptr), static_cast<const void*>(gb.data())}) {
          const auto cut = run_rows(*gpu_, cutlass, w, x, k, rows, bias);
          for (int64_t splits : {int64_t{0}, int64_t{1}, int64_t{3}, groups}) {
            split.force_row_splits(splits);
            const auto sp = run_rows(*gpu_, split, w, x, k, rows, bias);
            const size_t differ = differing(sp, cut);
            std::ostringstream what;
            what << scheme_name(scheme) << " n " << n << " k " << k << " m " << m
                 << (bias ? " bias" : "") << " splits " << splits;
            EXPECT_EQ(differ, 0u) << what.str();
            // The forced split (1, 3, every group) and the tile height did run.
            if (splits > 0) {
              EXPECT_EQ(split.stats().row_split_last_splits, splits) << what.str();
            }
            EXPECT_EQ(split.stats().row_split_last_tile_rows, m > 8 ? 16 : 8) << what.str();
          }
        }
      }
    }
  EXPECT_GT(split.stats().row_split, 0u);
  std::printf("  split-k kernel vs CUTLASS: %llu products compared\n",
              static_cast<unsigned long long>(split.stats().row_split));
}

// 128x128 weight blocks past 8 rows: CUTLASS's GEMM against the reference
// (sampled rows of the large products: rows are independent), with and
// without bias; shapes it does not take (n or k not a multiple of 128) fall
// back to another kernel; a row's result does not depend on the other rows
// nor on its place in a 128-row tile (bitwise).
TEST_F(CudaFp8Test, CutlassBlockGemmMatchesReference) {
  using Path = cuda::Fp8Gemm::Path;
  if (const char* why = no_cutlass_here()) GTEST_SKIP() << why;
  std::printf("  cutlass fp8 block gemm: built, sm_90\n");
  cuda::Fp8Gemm gemm(stream_);
  const int64_t n = 6144, k = 4096;
  const LinearWeight host = make_weight(Scheme::Block, n, k, 21);
  const LinearWeight w = gpu_->prepare_linear(host);
  const auto b = random_bf16_values(static_cast<size_t>(n), 23, -1, 1);
  Tensor gb = gpu_bf16(*gpu_, b, {n});
  double worst = 0;
  std::map<int64_t, std::vector<float>> results;  // m -> out without bias
  for (int64_t m : {9, 64, 300, 2048}) {
    const auto x =
        random_bf16_values(static_cast<size_t>(m * k), 29, -2, 2);  // one seed: prefixes agree
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < std::min<int64_t>(m, 8); ++r) rows.push_back(r);
    for (int64_t r = std::max<int64_t>(8, m - 5); r < m; ++r) rows.push_back(r);
    if (m > 200) rows.push_back(m / 2 + 3);
    const auto xs = rows_of(x, k, rows);
    for (bool with_bias : {false, true}) {
      std::ostringstream what;
      what << "cutlass m " << m << " n " << n << " k " << k << (with_bias ? " bias" : "");
      Tensor out = gpu_->alloc(DType::BF16, {m, n});
      const uint64_t before = gemm.stats().cutlass;
      gemm.force_path(std::nullopt);  // the usual choice must be CUTLASS here
      gemm.run(gpu_bf16(*gpu_, x, {m, k}).data(), m, view_of(w), with_bias ? gb.data() : nullptr,
               out.data());
      EXPECT_EQ(gemm.stats().cutlass, before + 1) << what.str() << ": not on the CUTLASS path";
      const auto got = from_gpu_bf16(*gpu_, out);
      std::vector<float> got_rows;
      for (int64_t r : rows)
        got_rows.insert(got_rows.end(), got.begin() + r * n, got.begin() + (r + 1) * n);
      std::vector<double> want, abs_sum;
      reference(host, xs, static_cast<int64_t>(rows.size()), with_bias ? &b : nullptr, want,
                abs_sum);
      worst = std::max(worst, check_linear(got_rows, want, abs_sum, what.str()));
      if (!with_bias) results[m] = got;
    }
  }
  std::printf("  fp8 linear %-32s worst err/tol %.3f\n", "block/group cutlass", worst);
  // Rows independent: the same x rows (one seed, so every m's x is a prefix
  // of the largest) give the same bits whatever m is.
  const auto& all = results[2048];
  for (int64_t m : {9, 64, 300})
    EXPECT_TRUE(std::equal(results[m].begin(), results[m].end(), all.begin()))
        << "m " << m << ": rows differ from the same rows in m 2048";
  // ... and wherever a row sits in its tile: rows 1000..1036 of the m = 2048
  // product (tile 7, places 104..127 and tile 8) as an m = 37 product.
  {
    const auto x = random_bf16_values(static_cast<size_t>(2048 * k), 29, -2, 2);
    const std::vector<float> part(x.begin() + 1000 * k, x.begin() + 1037 * k);
    Tensor out = gpu_->alloc(DType::BF16, {37, n});
    gemm.run(gpu_bf16(*gpu_, part, {37, k}).data(), 37, view_of(w), nullptr, out.data());
    EXPECT_TRUE(std::equal(all.begin() + 1000 * n, all.begin() + 1037 * n,
                           from_gpu_bf16(*gpu_, out).begin()))
        << "rows 1000..1036 differ when computed at other places in a tile";
  }
  // Shapes CUTLASS does not take: n or k not a multiple of 128. Forcing it
  // throws; the usual choice falls back and still matches the reference.
  for (auto [n2, k2] : {std::pair<int64_t, int64_t>{200, 256}, {256, 320}, {6100, 4096}}) {
    const LinearWeight host2 = make_weight(Scheme::Block, n2, k2, 31);
    const LinearWeight w2 = gpu_->prepare_linear(host2);
    const int64_t m = 33;
    const auto x = random_bf16_values(static_cast<size_t>(m * k2), 37, -2, 2);
    Tensor gx = gpu_bf16(*gpu_, x, {m, k2});
    Tensor out = gpu_->alloc(DType::BF16, {m, n2});
    gemm.force_path(Path::Cutlass);
    EXPECT_THROW(gemm.run(gx.data(), m, view_of(w2), nullptr, out.data()), Error)
        << "n " << n2 << " k " << k2;
    gemm.force_path(std::nullopt);
    const uint64_t before = gemm.stats().cutlass;
    gemm.run(gx.data(), m, view_of(w2), nullptr, out.data());
    EXPECT_EQ(gemm.stats().cutlass, before) << "n " << n2 << " k " << k2;
    std::vector<double> want, abs_sum;
    reference(host2, x, m, nullptr, want, abs_sum);
    check_linear(from_gpu_bf16(*gpu_, out), want, abs_sum,
                 "fallback n " + std::to_string(n2) + " k " + std::to_string(k2));
  }
  std::printf("  fp8 gemm calls: %llu cutlass, %llu cublaslt, %llu tiled\n",
              static_cast<unsigned long long>(gemm.stats().cutlass),
              static_cast<unsigned long long>(gemm.stats().cublaslt),
              static_cast<unsigned long long>(gemm.stats().tiled));
  // Through Backend::linear.
  const LinearWeight host3 = make_weight(Scheme::Block, 384, 512, 41);
  const LinearWeight w3 = gpu_->prepare_linear(host3);
  for (int64_t m : {9, 33, 130}) {
    const auto x = random_bf16_values(static_cast<size_t>(m * 512), 43, -2, 2);
    Tensor out = gpu_->alloc(DType::BF16, {m, 384});
    gpu_->linear(gpu_bf16(*gpu_, x, {m, 512}), w3, nullptr, out);
    std::vector<double> want, abs_sum;
    reference(host3, x, m, nullptr, want, abs_sum);
    check_linear(from_gpu_bf16(*gpu_, out), want, abs_sum,
                 "Backend::linear cutlass m " + std::to_string(m));
  }
}

}  // namespace
}  // namespace loom
