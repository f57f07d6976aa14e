// The RMSNorms and the fused gated activation writing their output quantised
// to FP8 for the FP8 linear layer that reads it next (Backend's next_linear,
// Fp8Gemm::prequantize): the layer's results and the kernels' FP8 bytes are
// those of quantising separately (quantize_fp8_rows), and the prepared rows
// serve only the call that follows.
#include <string>
#include <vector>

#include "backend/cuda/kernels/fp8/fp8_kernels.h"
#include "backend/cuda/kernels/kernels.h"
#include "cuda_test_util.h"
#include "fp8_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

// An rms_norm, add_rms_norm or fused gated activation told which FP8 layer
// reads its output next writes those rows quantised in the same pass, and
// the layer reads them: its outputs (and the norm's, the residual's, the
// activation's) are bit for bit those of quantising separately, for per-token
// and static activations, m from 1 to past the CUTLASS switch, rows of one or
// several 8-value pieces per thread (k 16400: the norm reads its own output
// back; inter 33040: the activation does). Block-scaled layers quantise x
// themselves (nothing prequantised), and a layer on other rows in between
// ends the prequantised rows' use.
TEST_F(CudaFp8Test, NormAndActivationQuantiseForTheNextLayer) {
  const float eps = 1e-5f;
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic, Scheme::Block}) {
    for (int64_t k : {int64_t{1040}, int64_t{16400}}) {
      const LinearWeight w = gpu_->prepare_linear(make_weight(scheme, 256, k, 11));
      const auto nw = random_bf16_values(static_cast<size_t>(k), 12, 0.5f, 1.5f);
      const Tensor norm_w = cpu_f32(nw, {k});
      for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{80}}) {
        SCOPED_TRACE(std::string(scheme_name(scheme)) + " k " + std::to_string(k) + " m " +
                     std::to_string(m));
        const auto x = random_bf16_values(static_cast<size_t>(m * k), 13, -2, 2);
        const auto res = random_bf16_values(static_cast<size_t>(m * k), 14, -2, 2);
        const bool fused = scheme != Scheme::Block;
        // res: add_rms_norm's residual, or none (rms_norm); next: the layer told, or none.
        auto run = [&](bool add, const LinearWeight* next, std::vector<float>* h_out,
                       std::vector<float>* res_out) {
          Tensor gx = gpu_bf16(*gpu_, x, {m, k}), gr = gpu_bf16(*gpu_, res, {m, k});
          Tensor h = gpu_->alloc(DType::BF16, {m, k}), out = gpu_->alloc(DType::BF16, {m, 256});
          if (add)
            gpu_->add_rms_norm(gx, gr, norm_w, eps, 0.0f, h, next);
          else
            gpu_->rms_norm(gx, norm_w, eps, 0.0f, h, next);
          gpu_->linear(h, w, nullptr, out);
          *h_out = from_gpu_bf16(*gpu_, h);
          *res_out = from_gpu_bf16(*gpu_, gr);
          return from_gpu_bf16(*gpu_, out);
        };
        for (bool add : {false, true}) {
          std::vector<float> h0, h1, r0, r1;
          const auto want = run(add, nullptr, &h0, &r0);
          const uint64_t before = cuda_backend_fp8_prequantized(*gpu_);
          const auto got = run(add, &w, &h1, &r1);
          EXPECT_EQ(cuda_backend_fp8_prequantized(*gpu_) - before, fused ? 1u : 0u);
          EXPECT_EQ(h1, h0) << (add ? "add_rms_norm" : "rms_norm") << " output";
          EXPECT_EQ(r1, r0) << "residual";
          EXPECT_EQ(got, want) << (add ? "add_rms_norm" : "rms_norm") << " -> linear";
        }
      }
    }
  }
  // The gated activation before a down projection.
  for (Scheme scheme : {Scheme::Channel, Scheme::TensorStatic}) {
    for (int64_t inter : {int64_t{1040}, int64_t{33040}}) {
      const LinearWeight w = gpu_->prepare_linear(make_weight(scheme, 256, inter, 21));
      for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{70}}) {
        if (inter > 2000 && m > 3) continue;
        for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
          SCOPED_TRACE(std::string(scheme_name(scheme)) + " inter " + std::to_string(inter) +
                       " m " + std::to_string(m) +
                       (act == GatedActivation::Silu ? " silu" : " gelu"));
          const auto gu = random_bf16_values(static_cast<size_t>(m * 2 * inter), 22, -3, 3);
          auto run = [&](const LinearWeight* next, std::vector<float>* act_out) {
            Tensor a = gpu_->alloc(DType::BF16, {m, inter}),
                   out = gpu_->alloc(DType::BF16, {m, 256});
            gpu_->gated_activation_fused(gpu_bf16(*gpu_, gu, {m, 2 * inter}), act, a, next);
            gpu_->linear(a, w, nullptr, out);
            *act_out = from_gpu_bf16(*gpu_, a);
            return from_gpu_bf16(*gpu_, out);
          };
          std::vector<float> a0, a1;
          const auto want = run(nullptr, &a0);
          const uint64_t before = cuda_backend_fp8_prequantized(*gpu_);
          const auto got = run(&w, &a1);
          EXPECT_EQ(cuda_backend_fp8_prequantized(*gpu_) - before, 1u);
          EXPECT_EQ(a1, a0) << "activation";
          EXPECT_EQ(got, want) << "activation -> linear";
        }
      }
    }
  }
  // The prepared rows serve the one linear or linear_many call that follows.
  const int64_t k = 1040, m = 4;
  const LinearWeight w = gpu_->prepare_linear(make_weight(Scheme::Channel, 256, k, 31));
  Tensor gx = gpu_bf16(*gpu_, random_bf16_values(static_cast<size_t>(m * k), 32, -2, 2), {m, k});
  Tensor other = gpu_bf16(*gpu_, random_bf16_values(static_cast<size_t>(m * k), 33, -2, 2), {m, k});
  Tensor h = gpu_->alloc(DType::BF16, {m, k}), out = gpu_->alloc(DType::BF16, {m, 256}),
         out2 = gpu_->alloc(DType::BF16, {m, 256});
  const Tensor ones = cpu_f32(std::vector<float>(static_cast<size_t>(k), 1.0f), {k});
  uint64_t before = cuda_backend_fp8_prequantized(*gpu_);
  gpu_->rms_norm(gx, ones, eps, 0.0f, h, &w);
  gpu_->linear_many(h, {{&w, nullptr, &out}, {&w, nullptr, &out2}});  // both read them
  gpu_->linear(h, w, nullptr, out);                                   // quantises again
  EXPECT_EQ(cuda_backend_fp8_prequantized(*gpu_) - before, 2u);
  before = cuda_backend_fp8_prequantized(*gpu_);
  gpu_->rms_norm(gx, ones, eps, 0.0f, h, &w);
  gpu_->linear(other, w, nullptr, out);  // the call after the norm, on other rows: ends them
  gpu_->linear(h, w, nullptr, out);
  EXPECT_EQ(cuda_backend_fp8_prequantized(*gpu_) - before, 0u);
}

// The kernels' FP8 rows themselves against quantize_fp8_rows run on the
// bf16 rows they stored: the same bytes and scales (per token and static),
// for the norm (with and without the residual add) and the gated activation;
// rows whose length is not a multiple of 16 are refused (nothing launched).
TEST_F(CudaFp8Test, FusedQuantisedRowsMatchTheQuantiser) {
  const float eps = 1e-5f;
  Tensor static_scale = gpu_->alloc(DType::F32, {1});
  const float s0 = 0.9f * 2.0f / 448.0f;
  gpu_->copy_from_host(static_scale, &s0, 4);
  auto bytes = [&](const Tensor& t) {
    std::vector<uint8_t> b(static_cast<size_t>(t.nbytes()));
    gpu_->copy_to_host(b.data(), t, b.size());
    return b;
  };
  for (bool is_static : {false, true})
    for (int64_t h : {int64_t{1040}, int64_t{16400}, int64_t{33040}})
      for (int64_t m : {int64_t{1}, int64_t{7}}) {
        SCOPED_TRACE(std::string(is_static ? "static" : "per token") + " h " + std::to_string(h) +
                     " m " + std::to_string(m));
        const cuda::Fp8ActMode mode =
            is_static ? cuda::Fp8ActMode::Static : cuda::Fp8ActMode::Token;
        const float* ss = is_static ? static_scale.data_as<const float>() : nullptr;
        Tensor q1 = gpu_->alloc(DType::F8_E4M3, {m, h}), q2 = gpu_->alloc(DType::F8_E4M3, {m, h});
        Tensor sc1 = gpu_->alloc(DType::F32, {m}), sc2 = gpu_->alloc(DType::F32, {m});
        cuda::Fp8RowsOut rows{q1.data_as<uint8_t>(), sc1.data_as<float>(), ss};
        auto compare = [&](const Tensor& stored, const char* what) {
          cuda::quantize_fp8_rows(stored.data(), m, m, h, mode, ss, q2.data_as<uint8_t>(),
                                  sc2.data_as<float>(), m, stream_);
          EXPECT_EQ(bytes(q1), bytes(q2)) << what << " FP8 rows";
          EXPECT_EQ(bytes(sc1), bytes(sc2)) << what << " scales";
        };
        Tensor x =
            gpu_bf16(*gpu_, random_bf16_values(static_cast<size_t>(m * h), 61, -2, 2), {m, h});
        Tensor res =
            gpu_bf16(*gpu_, random_bf16_values(static_cast<size_t>(m * h), 62, -2, 2), {m, h});
        Tensor nw = gpu_->alloc(DType::F32, {h});
        const auto nwv = random_bf16_values(static_cast<size_t>(h), 63, 0.5f, 1.5f);
        gpu_->copy_from_host(nw, nwv.data(), nwv.size() * 4);
        Tensor out = gpu_->alloc(DType::BF16, {m, h});
        for (bool add : {false, true}) {
          ASSERT_TRUE(cuda::rms_norm_bf16(x.data(), add ? res.data() : nullptr, nw.data(),
                                          DType::F32, 0.0f, eps, out.data(), m, h, stream_, &rows));
          compare(out, add ? "add_rms_norm" : "rms_norm");
        }
        for (bool gelu : {false, true}) {
          Tensor gu = gpu_bf16(*gpu_, random_bf16_values(static_cast<size_t>(m * 2 * h), 64, -3, 3),
                               {m, 2 * h});
          ASSERT_TRUE(
              cuda::gated_activation_fused_bf16(gu.data(), out.data(), m, h, gelu, stream_, &rows));
          compare(out, gelu ? "gelu" : "silu");
        }
      }
  // Rows of 1032 values (not a multiple of 16): refused.
  Tensor x = gpu_->alloc(DType::BF16, {2, 1032}), out = gpu_->alloc(DType::BF16, {2, 1032});
  Tensor nw = gpu_->alloc(DType::F32, {1032}), q = gpu_->alloc(DType::F8_E4M3, {2, 1032});
  Tensor sc = gpu_->alloc(DType::F32, {2}), gu = gpu_->alloc(DType::BF16, {2, 2064});
  cuda::Fp8RowsOut rows{q.data_as<uint8_t>(), sc.data_as<float>(), nullptr};
  EXPECT_FALSE(cuda::rms_norm_bf16(x.data(), nullptr, nw.data(), DType::F32, 0.0f, eps, out.data(),
                                   2, 1032, stream_, &rows));
  EXPECT_FALSE(
      cuda::gated_activation_fused_bf16(gu.data(), out.data(), 2, 1032, false, stream_, &rows));
}

}  // namespace
}  // namespace loom
