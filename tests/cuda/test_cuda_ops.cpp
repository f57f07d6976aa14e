// CUDA elementwise, row and memory ops against the CPU fp32 backend, on inputs
// rounded to bf16 (so only GPU arithmetic and bf16 output rounding differ).
// Tolerances (one bf16 rounding is at most 2^-8 relative):
//  prepare_weight: exact (bf16 of the dequantised value; f32 for vectors)
//  embedding, add, gather_rows, write_kv: one rounding or exact
//  rms_norm / add_rms_norm: rel 1e-2 + abs 2e-3 (rounded residual, then rounded output)
//  rope: rel 5e-3 + abs 5e-3;  gated_activation, softcap: rel 6e-3 + abs 1e-3
//  argmax_rows: exact (the Sampler's greedy rule: first maximum, NaNs skipped)
#include <cstring>

#include "../backend/reference.h"
#include "backend/quant/quant.h"
#include "cuda_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

class CudaOpsTest : public CudaAndCpuTest {};

TEST_F(CudaOpsTest, NameAndDtype) {
  EXPECT_EQ(gpu_->device(), Device::Cuda);
  EXPECT_EQ(gpu_->activation_dtype(), DType::BF16);
  EXPECT_NE(gpu_->name().find("cuda"), std::string::npos);
  Tensor z = gpu_->alloc(DType::BF16, {3, 5});
  EXPECT_EQ(from_gpu_bf16(*gpu_, z), std::vector<float>(15, 0.0f));
}

TEST_F(CudaOpsTest, PrepareWeightFloatAndQuantised) {
  const int64_t rows = 7, cols = 512;
  const auto vals = random_bf16_values(rows * cols, 1, -2, 2);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor host = Tensor::cpu(t, {rows, cols});
    std::vector<float> want(vals.size());
    const int64_t stride = host.row_stride_bytes();
    for (int64_t r = 0; r < rows; ++r) {
      auto* dst = static_cast<uint8_t*>(host.data()) + r * stride;
      quant::quantize_row(t, vals.data() + r * cols, dst, cols);
      quant::dequantize_row(t, dst, want.data() + r * cols, cols);
    }
    for (float& w : want) w = bf16_to_f32(f32_to_bf16(w));
    Tensor dev = gpu_->prepare_weight(host);
    EXPECT_EQ(dev.device(), Device::Cuda);
    EXPECT_EQ(dev.dtype(), DType::BF16);
    EXPECT_EQ(dev.shape(), host.shape());
    expect_close(from_gpu_bf16(*gpu_, dev), want, 0, 0);
  }
  // Vectors stay f32 (exactly).
  const auto v = random_bf16_values(33, 2);
  std::vector<float> raw(33);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = v[i] * 1.0001f;  // not bf16-representable
  Tensor dev = gpu_->prepare_weight(cpu_f32(raw, {33}));
  EXPECT_EQ(dev.dtype(), DType::F32);
  std::vector<float> back(33);
  gpu_->copy_to_host(back.data(), dev, 33 * 4);
  EXPECT_EQ(back, raw);
}

TEST_F(CudaOpsTest, PrepareWeightLargerThanTheStagingBuffers) {
  // 150 MiB of bf16 (copied as it is) and 96 MiB of f32 (converted on the
  // GPU): several of the weight stager's 64 MiB pinned buffers each, ragged
  // ends, and a step between them (which frees the stager; the next weight
  // makes a new one).
  const int64_t cols = 4099, rows = (int64_t{150} << 20) / (2 * cols);
  Tensor host = Tensor::cpu(DType::BF16, {rows, cols});
  auto* bits = static_cast<uint16_t*>(host.data());
  for (int64_t i = 0; i < rows * cols; ++i)
    bits[i] = static_cast<uint16_t>(((uint64_t(i) * 2654435761u) >> 7) & 0x3fff);  // finite, varied
  Tensor dev = gpu_->prepare_weight(host);
  std::vector<uint16_t> back(static_cast<size_t>(rows * cols));
  gpu_->copy_to_host(back.data(), dev, back.size() * 2);
  EXPECT_EQ(std::memcmp(back.data(), bits, back.size() * 2), 0);

  AttentionMetadata meta;  // one token of one sequence in block 0
  meta.num_seqs = 1;
  meta.query_start = {0, 1};
  meta.context_lens = {1};
  meta.block_tables = {0};
  meta.max_blocks_per_seq = 1;
  meta.slot_mapping = {0};
  gpu_->prepare_attention(meta, 1, 16, 1);

  const int64_t frows = 6151, fcols = 4096;  // 96 MiB of f32, 16M-value conversion chunks
  std::vector<float> vals(static_cast<size_t>(frows * fcols));
  for (size_t i = 0; i < vals.size(); ++i)
    vals[i] = float(int64_t(i % 1000003) - 500000) * 1.37e-3f;
  Tensor fdev = gpu_->prepare_weight(cpu_f32(vals, {frows, fcols}));
  EXPECT_EQ(fdev.dtype(), DType::BF16);
  std::vector<float> want(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) want[i] = bf16_to_f32(f32_to_bf16(vals[i]));
  expect_close(from_gpu_bf16(*gpu_, fdev), want, 0, 0);
}

TEST_F(CudaOpsTest, Embedding) {
  for (int64_t hidden : {512, 7, 4096}) {
    SCOPED_TRACE(hidden);
    const int64_t vocab = 37;
    const auto table = random_bf16_values(vocab * hidden, 11);
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
    Tensor gt = gpu_->prepare_weight(cpu_f32(table, {vocab, hidden}));
    Tensor gout = gpu_->alloc(DType::BF16, {5, hidden});
    gpu_->embedding(gt, gpu_i32(*gpu_, ids), 2.5f, gout);
    Tensor cout = Tensor::cpu(DType::F32, {5, hidden});
    cpu_->embedding(cpu_f32(table, {vocab, hidden}), cpu_i32(ids), 2.5f, cout);
    expect_close(from_gpu_bf16(*gpu_, gout), values(cout), 4e-3, 0);
  }
}

TEST_F(CudaOpsTest, RmsNormAndAddRmsNorm) {
  for (int64_t rows : {1, 3, 17})
    for (int64_t h : {7, 16, 32, 64, 80, 896, 4096})
      for (float offset : {0.0f, 1.0f}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << h << " offset " << offset);
        const auto xv = random_bf16_values(rows * h, 21, -3, 3);
        const auto rv = random_bf16_values(rows * h, 22, -3, 3);
        const auto wv = random_bf16_values(h, 23, -1, 1);
        Tensor cx = cpu_f32(xv, {rows, h}), cw = cpu_f32(wv, {h}),
               cout = Tensor::cpu(DType::F32, {rows, h});
        cpu_->rms_norm(cx, cw, 1e-6f, offset, cout);
        // Weight as prepared (f32 on the GPU), as bf16 on the GPU, and as a host tensor.
        Tensor weights[] = {gpu_->prepare_weight(cw), gpu_bf16(*gpu_, wv, {h}), cw};
        for (Tensor& gw : weights) {
          Tensor gx = gpu_bf16(*gpu_, xv, {rows, h}), gout = gpu_->alloc(DType::BF16, {rows, h});
          gpu_->rms_norm(gx, gw, 1e-6f, offset, gout);
          expect_close(from_gpu_bf16(*gpu_, gout), values(cout), 1e-2, 2e-3, "rms_norm");
        }
        // In place.
        Tensor gx = gpu_bf16(*gpu_, xv, {rows, h});
        gpu_->rms_norm(gx, weights[0], 1e-6f, offset, gx);
        expect_close(from_gpu_bf16(*gpu_, gx), values(cout), 1e-2, 2e-3, "rms_norm in place");

        Tensor cres = cpu_f32(rv, {rows, h});
        cpu_->add_rms_norm(cx, cres, cw, 1e-5f, offset, cout);
        Tensor gres = gpu_bf16(*gpu_, rv, {rows, h}), gout = gpu_->alloc(DType::BF16, {rows, h});
        gx = gpu_bf16(*gpu_, xv, {rows, h});
        gpu_->add_rms_norm(gx, gres, weights[0], 1e-5f, offset, gout);
        expect_close(from_gpu_bf16(*gpu_, gres), values(cres), 4e-3, 0, "add_rms_norm residual");
        expect_close(from_gpu_bf16(*gpu_, gout), values(cout), 1e-2, 2e-3, "add_rms_norm out");
      }
  Tensor x = gpu_->alloc(DType::BF16, {2, 64}), out = gpu_->alloc(DType::BF16, {2, 64});
  Tensor wrong = gpu_->alloc(DType::F32, {63});
  EXPECT_THROW(gpu_->rms_norm(x, wrong, 1e-6f, 0.0f, out), Error);
  Tensor f32x = gpu_->alloc(DType::F32, {2, 64}), w = gpu_->alloc(DType::F32, {64});
  EXPECT_THROW(gpu_->rms_norm(f32x, w, 1e-6f, 0.0f, out), Error);
}

TEST_F(CudaOpsTest, Add) {
  for (int64_t n : {1, 7, 8, 1000, 4096 * 3 + 5}) {
    const auto a = random_bf16_values(n, 31, -4, 4), b = random_bf16_values(n, 32, -4, 4);
    Tensor ga = gpu_bf16(*gpu_, a, {n}), gb = gpu_bf16(*gpu_, b, {n});
    gpu_->add(ga, gb);
    Tensor ca = cpu_f32(a, {n});
    cpu_->add(ca, cpu_f32(b, {n}));
    expect_close(from_gpu_bf16(*gpu_, ga), values(ca), 4e-3, 1e-30);
  }
  // An unaligned view (row slice starting at an odd element) takes the scalar path.
  const auto a = random_bf16_values(3 * 9, 33), b = random_bf16_values(2 * 9, 34);
  Tensor ga = gpu_bf16(*gpu_, a, {3, 9});
  Tensor view = ga.slice_rows(1, 2);
  gpu_->add(view, gpu_bf16(*gpu_, b, {2, 9}));
  auto got = from_gpu_bf16(*gpu_, ga);
  for (int i = 0; i < 27; ++i) {
    const float want = i < 9 ? a[i] : bf16_to_f32(f32_to_bf16(a[i] + b[i - 9]));
    EXPECT_EQ(got[i], want) << i;
  }
}

TEST_F(CudaOpsTest, Rope) {
  const std::vector<int32_t> pos = {0, 1, 7, 1000, 65000};
  const int64_t t = 5, heads = 3;
  for (int64_t hd : {16, 32, 64, 80, 96, 128, 256})
    for (int rot :
         {static_cast<int>(hd), static_cast<int>(hd / 2), static_cast<int>(hd / 4 / 2 * 2)})
      for (bool interleaved : {false, true})
        for (float mscale : {1.0f, 1.2f}) {
          SCOPED_TRACE(::testing::Message() << "hd " << hd << " rot " << rot << " interleaved "
                                            << interleaved << " mscale " << mscale);
          const auto xv = random_bf16_values(t * heads * hd, 41);
          std::vector<float> freq(rot / 2);
          for (int j = 0; j < rot / 2; ++j) freq[j] = std::pow(10000.0f, -2.0f * j / rot);
          Tensor cx = cpu_f32(xv, {t, heads, hd});
          cpu_->rope(cx, cpu_i32(pos), cpu_f32(freq, {rot / 2}), rot, interleaved, mscale);
          Tensor gx = gpu_bf16(*gpu_, xv, {t, heads, hd});
          gpu_->rope(gx, gpu_i32(*gpu_, pos), gpu_->prepare_weight(cpu_f32(freq, {rot / 2})), rot,
                     interleaved, mscale);
          expect_close(from_gpu_bf16(*gpu_, gx), values(cx), 5e-3, 5e-3);
        }
}

TEST_F(CudaOpsTest, GatedActivationAndSoftcap) {
  for (int64_t n : {5, 64, 14336 * 2 + 3}) {
    const auto g = random_bf16_values(n, 51, -6, 6), u = random_bf16_values(n, 52, -2, 2);
    for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
      Tensor cout = Tensor::cpu(DType::F32, {n});
      cpu_->gated_activation(cpu_f32(g, {n}), cpu_f32(u, {n}), act, cout);
      Tensor gout = gpu_->alloc(DType::BF16, {n});
      gpu_->gated_activation(gpu_bf16(*gpu_, g, {n}), gpu_bf16(*gpu_, u, {n}), act, gout);
      expect_close(from_gpu_bf16(*gpu_, gout), values(cout), 6e-3, 1e-3, "gated");
    }
    const auto x = random_bf16_values(n, 53, -100, 100);
    Tensor cx = cpu_f32(x, {n});
    cpu_->softcap(cx, 30.0f);
    Tensor gx = gpu_bf16(*gpu_, x, {n});
    gpu_->softcap(gx, 30.0f);
    expect_close(from_gpu_bf16(*gpu_, gx), values(cx), 6e-3, 1e-3, "softcap");
  }
}

TEST_F(CudaOpsTest, GatherRows) {
  const auto x = random_bf16_values(10 * 64, 61);
  Tensor gx = gpu_bf16(*gpu_, x, {10, 64});
  const std::vector<int32_t> rows = {9, 0, 3, 3};
  Tensor gout = gpu_->alloc(DType::BF16, {4, 64});
  gpu_->gather_rows(gx, rows, gout);
  const auto got = from_gpu_bf16(*gpu_, gout);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int j = 0; j < 64; ++j) EXPECT_EQ(got[i * 64 + j], x[rows[i] * 64 + j]);
  // Odd row sizes (6 bytes) and another dtype.
  const auto y = random_bf16_values(5 * 3, 62);
  Tensor gy = gpu_bf16(*gpu_, y, {5, 3}), gyo = gpu_->alloc(DType::BF16, {2, 3});
  gpu_->gather_rows(gy, {4, 1}, gyo);
  const auto goty = from_gpu_bf16(*gpu_, gyo);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(goty[j], y[12 + j]);
    EXPECT_EQ(goty[3 + j], y[3 + j]);
  }
  std::vector<int32_t> iv = {1, 2, 3, 4, 5, 6};
  Tensor gi = gpu_->alloc(DType::I32, {3, 2}), gio = gpu_->alloc(DType::I32, {1, 2});
  gpu_->copy_from_host(gi, iv.data(), 24);
  gpu_->gather_rows(gi, {2}, gio);
  int32_t back[2];
  gpu_->copy_to_host(back, gio, 8);
  EXPECT_EQ(back[0], 5);
  EXPECT_EQ(back[1], 6);
  EXPECT_THROW(gpu_->gather_rows(gx, {10}, gyo), Error);
}

TEST_F(CudaOpsTest, WriteKv) {
  const int64_t blocks = 5, bs = 16, kvh = 2, hd = 64, t = 7;
  KvLayerCache cache{gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd}),
                     gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd})};
  const auto k = random_bf16_values(t * kvh * hd, 71), v = random_bf16_values(t * kvh * hd, 72);
  AttentionMetadata meta;
  meta.slot_mapping = {0, 15, 16, -1, 79, 33, 40};
  gpu_->write_kv(gpu_bf16(*gpu_, k, {t, kvh, hd}), gpu_bf16(*gpu_, v, {t, kvh, hd}), cache, meta);
  const auto kc = from_gpu_bf16(*gpu_, cache.k), vc = from_gpu_bf16(*gpu_, cache.v);
  std::vector<float> want_k(kc.size(), 0.0f), want_v(vc.size(), 0.0f);
  const int64_t row = kvh * hd;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t slot = meta.slot_mapping[i];
    if (slot < 0) continue;
    for (int64_t j = 0; j < row; ++j) {
      want_k[slot * row + j] = k[i * row + j];
      want_v[slot * row + j] = v[i * row + j];
    }
  }
  EXPECT_EQ(kc, want_k);
  EXPECT_EQ(vc, want_v);
  meta.slot_mapping[0] = blocks * bs;  // out of range
  EXPECT_THROW(gpu_->write_kv(gpu_bf16(*gpu_, k, {t, kvh, hd}), gpu_bf16(*gpu_, v, {t, kvh, hd}),
                              cache, meta),
               Error);
}

// split_qkv equals the unfused GPU ops (rope on q and k, write_kv): v and the
// unrotated split exactly, rotated q and k within one bf16 rounding;
// gated_activation_fused equals gated_activation on the two halves.
TEST_F(CudaOpsTest, FusedProjectionOpsEqualUnfused) {
  ASSERT_TRUE(gpu_->supports_fused_projections());
  const int64_t blocks = 6, bs = 16, t = 7;
  for (int64_t hd : {64, 128, 80})
    for (auto [heads, kvh] : {std::pair<int64_t, int64_t>{4, 1}, {8, 8}, {6, 2}})
      for (int rot : {static_cast<int>(hd), static_cast<int>(hd / 2)})
        for (bool interleaved : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "hd " << hd << " heads " << heads << "/" << kvh
                                            << " rot " << rot << " interleaved " << interleaved);
          const int64_t q_dim = heads * hd, kv_dim = kvh * hd;
          const QkvRows in = random_qkv_rows(t, q_dim, kv_dim, 81);
          const std::vector<float> freq = rope_inv_freq(rot);
          Tensor pos = gpu_i32(*gpu_, {0, 1, 5, 17, 100, 1000, 4095});
          Tensor inv = gpu_->prepare_weight(cpu_f32(freq, {rot / 2}));
          AttentionMetadata meta;
          meta.slot_mapping = {0, 15, 16, -1, 79, 33, 40};
          // Unfused reference.
          Tensor q_ref = gpu_bf16(*gpu_, in.q, {t, heads, hd}),
                 k_ref = gpu_bf16(*gpu_, in.k, {t, kvh, hd});
          gpu_->rope(q_ref, pos, inv, rot, interleaved, 1.1f);
          gpu_->rope(k_ref, pos, inv, rot, interleaved, 1.1f);
          KvLayerCache ref{gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd}),
                           gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd})};
          gpu_->write_kv(k_ref, gpu_bf16(*gpu_, in.v, {t, kvh, hd}), ref, meta);
          // Fused, into the cache.
          Tensor fused = gpu_bf16(*gpu_, in.qkv, {t, q_dim + 2 * kv_dim});
          Tensor q = gpu_->alloc(DType::BF16, {t, heads, hd}), none;
          KvLayerCache got{gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd}),
                           gpu_->alloc(DType::BF16, {blocks, bs, kvh, hd})};
          Backend::QkvRope r{&pos, &inv, rot, interleaved, 1.1f};
          gpu_->split_qkv(fused, &r, q, none, none, &got, &meta);
          // One bf16 rounding apart at most (the compiler may contract the
          // rotation into FMAs differently in the two kernels).
          expect_close(from_gpu_bf16(*gpu_, q), from_gpu_bf16(*gpu_, q_ref), 8e-3, 1e-3, "q");
          expect_close(from_gpu_bf16(*gpu_, got.k), from_gpu_bf16(*gpu_, ref.k), 8e-3, 1e-3, "k");
          EXPECT_EQ(from_gpu_bf16(*gpu_, got.v), from_gpu_bf16(*gpu_, ref.v));
          // Fused, plain split (no rope) into k and v.
          Tensor k = gpu_->alloc(DType::BF16, {t, kvh, hd}),
                 v = gpu_->alloc(DType::BF16, {t, kvh, hd});
          gpu_->split_qkv(fused, nullptr, q, k, v, nullptr, nullptr);
          EXPECT_EQ(from_gpu_bf16(*gpu_, q), in.q);
          EXPECT_EQ(from_gpu_bf16(*gpu_, k), in.k);
          EXPECT_EQ(from_gpu_bf16(*gpu_, v), in.v);
        }
  // Widths not a multiple of 8 take the scalar kernel, the rest the 8-wide one; 70,001 rows
  // pass the grid's 65,535 rows (its blocks then take several rows each).
  for (auto [rows, inter] : {std::pair<int64_t, int64_t>{3, 5}, {3, 64}, {3, 14336}, {70001, 24}}) {
    const auto gu = random_bf16_values(rows * 2 * inter, 82, -6, 6);
    std::vector<float> g, u;
    for (int64_t r = 0; r < rows; ++r) {
      g.insert(g.end(), gu.begin() + r * 2 * inter, gu.begin() + r * 2 * inter + inter);
      u.insert(u.end(), gu.begin() + r * 2 * inter + inter, gu.begin() + (r + 1) * 2 * inter);
    }
    for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
      Tensor want = gpu_->alloc(DType::BF16, {rows, inter}),
             got = gpu_->alloc(DType::BF16, {rows, inter});
      gpu_->gated_activation(gpu_bf16(*gpu_, g, {rows, inter}), gpu_bf16(*gpu_, u, {rows, inter}),
                             act, want);
      gpu_->gated_activation_fused(gpu_bf16(*gpu_, gu, {rows, 2 * inter}), act, got);
      EXPECT_EQ(from_gpu_bf16(*gpu_, got), from_gpu_bf16(*gpu_, want))
          << "rows " << rows << " inter " << inter;
    }
  }
}

TEST_F(CudaOpsTest, ArgmaxRows) {
  const float inf = INFINITY, nan = NAN;
  for (int64_t vocab : {1, 7, 9, 1000, 32000, 128256, 151936, 262144})
    for (int64_t rows : {1, 5, 67}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << vocab);
      // Few distinct values (so maxima tie often), then planted ties, NaNs
      // and infinities.
      auto v = random_bf16_values(rows * vocab, static_cast<uint32_t>(vocab + rows), -8, 8);
      for (float& x : v) x = std::round(x * 4) / 4;
      std::mt19937 rng(static_cast<uint32_t>(vocab * 3 + rows));
      for (int64_t r = 0; r < rows; ++r) {
        float* row = v.data() + r * vocab;
        const auto at = [&] { return static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab)); };
        switch (r % 8) {
          case 0:
            row[at()] = 9.0f, row[at()] = 9.0f, row[at()] = 9.0f;
            break;  // ties of the max
          case 1:
            row[at()] = nan, row[at()] = 20.0f, row[at()] = nan;
            break;
          case 2:
            for (int64_t i = 0; i < vocab; ++i) row[i] = -inf;
            break;  // first index
          case 3:
            for (int64_t i = 0; i < vocab; ++i) row[i] = nan;
            break;  // 0
          case 4:
            for (int64_t i = 0; i < vocab; ++i) row[i] = i % 3 ? nan : -inf;
            break;
          case 5:
            row[vocab - 1] = inf, row[at()] = inf;
            break;
          case 6:
            for (int64_t i = 0; i < vocab; ++i) row[i] = (i % 2 ? -0.0f : 0.0f);
            break;
          default:
            break;
        }
      }
      const auto want = ref::argmax_rows(v, rows, vocab);
      std::vector<int32_t> got;
      gpu_->argmax_rows(gpu_bf16(*gpu_, v, {rows, vocab}), got);
      EXPECT_EQ(got, want) << "bf16";
      gpu_->argmax_rows(gpu_f32(*gpu_, v, {rows, vocab}), got);
      EXPECT_EQ(got, want) << "f32";
      cpu_->argmax_rows(cpu_f32(v, {rows, vocab}), got);
      EXPECT_EQ(got, want) << "cpu";
    }
  // A view whose rows start off 16-byte boundaries takes the scalar path.
  const int64_t vocab = 13;
  auto v = random_bf16_values(4 * vocab, 5, -3, 3);
  v[1 * vocab + 4] = v[1 * vocab + 9] = 5.0f;
  Tensor all = gpu_bf16(*gpu_, v, {4, vocab});
  std::vector<int32_t> got;
  gpu_->argmax_rows(all.slice_rows(1, 3), got);
  const std::vector<float> tail(v.begin() + vocab, v.end());
  EXPECT_EQ(got, ref::argmax_rows(tail, 3, vocab));
  EXPECT_EQ(got[0], 4);
  Tensor i32 = gpu_->alloc(DType::I32, {2, 4});
  EXPECT_THROW(gpu_->argmax_rows(i32, got), Error);
}

}  // namespace
}  // namespace loom
