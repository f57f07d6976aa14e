// Elementwise and row ops against the reference, on every ISA:
//  embedding (every table dtype): exact (same dequantisation, times scale: rel 1e-6)
//  rms_norm / add_rms_norm: rel 1e-5 + abs 1e-6
//  rope: abs 2e-5 (f32 angle as HF; cos/sin of it in float vs double)
//  gated_activation: rel 1e-5 + abs 1e-6;  softcap: rel 1e-6 + abs 1e-6;  add, gather_rows: exact.
#include "reference.h"

namespace loom {
namespace {

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  double abs) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= rel * std::fabs(double(want[i])) + abs)) {
      ADD_FAILURE() << "[" << i << "] " << got[i] << " != " << want[i];
      ++bad;
    }
}

class OpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

TEST_F(OpsTest, Embedding) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t vocab = 37, hidden = 512;
    const ref::Weight table =
        ref::make_weight(t, ref::random_floats(vocab * hidden, 11), vocab, hidden);
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
    Tensor idt = ref::i32_tensor(ids);
    ref::for_each_isa([&](cpu::Isa) {
      Tensor out = Tensor::cpu(DType::F32, {5, hidden});
      be_->embedding(table.tensor, idt, 2.5f, out);
      std::vector<float> want;
      for (int32_t id : ids)
        for (int64_t j = 0; j < hidden; ++j)
          want.push_back(table.dequantized[id * hidden + j] * 2.5f);
      expect_close(ref::to_vector(out), want, 1e-6, 0);
    });
  }
  Tensor table = Tensor::cpu(DType::F32, {4, 8});
  Tensor bad_ids = ref::i32_tensor({1, 4});
  Tensor out = Tensor::cpu(DType::F32, {2, 8});
  EXPECT_THROW(be_->embedding(table, bad_ids, 1.0f, out), Error);
}

TEST_F(OpsTest, RmsNormAndAddRmsNorm) {
  for (int64_t rows : {1, 3, 17})
    for (int64_t h : {7, 64, 896, 2304})
      for (float offset : {0.0f, 1.0f}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << h << " offset " << offset);
        const auto xv = ref::random_floats(rows * h, 21, -3, 3);
        const auto rv = ref::random_floats(rows * h, 22, -3, 3);
        const auto wv = ref::random_floats(h, 23, -1, 1);
        Tensor x = ref::f32_tensor(xv, {rows, h}), w = ref::f32_tensor(wv, {h});
        ref::for_each_isa([&](cpu::Isa) {
          Tensor out = Tensor::cpu(DType::F32, {rows, h});
          be_->rms_norm(x, w, 1e-6f, offset, out);
          expect_close(ref::to_vector(out), ref::rms_norm(xv, wv, h, 1e-6f, offset), 1e-5, 1e-6);

          Tensor res = ref::f32_tensor(rv, {rows, h});
          be_->add_rms_norm(x, res, w, 1e-5f, offset, out);
          std::vector<float> sum(rv.size());
          for (size_t i = 0; i < sum.size(); ++i) sum[i] = rv[i] + xv[i];
          expect_close(ref::to_vector(res), sum, 0, 0);
          expect_close(ref::to_vector(out), ref::rms_norm(sum, wv, h, 1e-5f, offset), 1e-5, 1e-6);
        });
      }
  // bf16 norm weights are accepted too.
  const auto wv = ref::random_floats(64, 5);
  const ref::Weight w = ref::make_weight(DType::BF16, wv, 1, 64);
  Tensor wb = w.tensor.reshape({64});
  const auto xv = ref::random_floats(2 * 64, 6);
  Tensor x = ref::f32_tensor(xv, {2, 64}), out = Tensor::cpu(DType::F32, {2, 64});
  be_->rms_norm(x, wb, 1e-6f, 0.0f, out);
  expect_close(ref::to_vector(out), ref::rms_norm(xv, w.dequantized, 64, 1e-6f, 0.0f), 1e-5, 1e-6);
  Tensor wrong = Tensor::cpu(DType::F32, {63});
  EXPECT_THROW(be_->rms_norm(x, wrong, 1e-6f, 0.0f, out), Error);
}

TEST_F(OpsTest, Add) {
  const auto av = ref::random_floats(3 * 100, 1), bv = ref::random_floats(3 * 100, 2);
  Tensor a = ref::f32_tensor(av, {3, 100}), b = ref::f32_tensor(bv, {3, 100});
  be_->add(a, b);
  std::vector<float> want(av.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = av[i] + bv[i];
  expect_close(ref::to_vector(a), want, 0, 0);
  Tensor c = Tensor::cpu(DType::F32, {3, 99});
  EXPECT_THROW(be_->add(a, c), Error);
}

TEST_F(OpsTest, Rope) {
  struct Case {
    int64_t t, heads, hd;
    int rot;
    bool interleaved;
    float mscale;
  };
  for (const Case& c : {Case{1, 4, 64, 64, false, 1.0f}, Case{3, 2, 128, 128, true, 1.0f},
                        Case{17, 3, 256, 256, false, 1.0f}, Case{5, 2, 128, 64, false, 1.2f},
                        Case{5, 2, 80, 32, true, 0.9f}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.t << " hd=" << c.hd << " rot=" << c.rot
                                      << (c.interleaved ? " interleaved" : " neox"));
    const auto xv = ref::random_floats(c.t * c.heads * c.hd, 31);
    std::vector<int32_t> pos(c.t);
    for (int64_t i = 0; i < c.t; ++i) pos[i] = static_cast<int32_t>(i * 977 % 5000);
    std::vector<float> freq(c.rot / 2);
    for (int j = 0; j < c.rot / 2; ++j)
      freq[j] = static_cast<float>(std::pow(10000.0, -2.0 * j / c.rot));
    Tensor post = ref::i32_tensor(pos), ft = ref::f32_tensor(freq, {c.rot / 2});
    auto want = xv;
    ref::rope(want, c.t, c.heads, c.hd, pos, freq, c.rot, c.interleaved, c.mscale);
    ref::for_each_isa([&](cpu::Isa) {
      Tensor x = ref::f32_tensor(xv, {c.t, c.heads, c.hd});
      be_->rope(x, post, ft, c.rot, c.interleaved, c.mscale);
      expect_close(ref::to_vector(x), want, 0, 2e-5);
    });
  }
}

TEST_F(OpsTest, GatedActivation) {
  for (int64_t n : {1, 7, 4864}) {
    const auto gv = ref::random_floats(3 * n, 41, -8, 8), uv = ref::random_floats(3 * n, 42, -2, 2);
    Tensor g = ref::f32_tensor(gv, {3, n}), u = ref::f32_tensor(uv, {3, n});
    for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
      std::vector<float> want(gv.size());
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = (act == GatedActivation::Silu ? ref::silu(gv[i]) : ref::gelu_tanh(gv[i])) * uv[i];
      ref::for_each_isa([&](cpu::Isa) {
        Tensor out = Tensor::cpu(DType::F32, {3, n});
        be_->gated_activation(g, u, act, out);
        expect_close(ref::to_vector(out), want, 1e-5, 1e-6);
      });
    }
  }
}

TEST_F(OpsTest, GatedActivationExtremeGates) {
  // The vector exp clamps its argument: gates far beyond it in both directions,
  // at every lane position (33 values: two full 16-lane vectors and a tail).
  const std::vector<float> edges = {-1000, -100, -88.5f, -87.5f, -44,   -30, -1e-3f, 0,
                                    1e-3f, 30,   44,     87,     88.5f, 100, 1000};
  std::vector<float> gv, uv;
  for (int i = 0; i < 33; ++i) {
    gv.push_back(edges[static_cast<size_t>(i) % edges.size()]);
    uv.push_back(0.5f + 0.25f * static_cast<float>(i % 3));
  }
  const int64_t n = static_cast<int64_t>(gv.size());
  for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
    std::vector<float> want(gv.size());
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = (act == GatedActivation::Silu ? ref::silu(gv[i]) : ref::gelu_tanh(gv[i])) * uv[i];
    ref::for_each_isa([&](cpu::Isa) {
      Tensor out = Tensor::cpu(DType::F32, {1, n});
      be_->gated_activation(ref::f32_tensor(gv, {1, n}), ref::f32_tensor(uv, {1, n}), act, out);
      const auto got = ref::to_vector(out);
      for (float v : got) EXPECT_TRUE(std::isfinite(v));
      expect_close(got, want, 1e-5, 1e-6);
    });
  }
}

TEST_F(OpsTest, Softcap) {
  const auto xv = ref::random_floats(1000, 51, -100, 100);
  std::vector<float> want(xv.size());
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = static_cast<float>(30.0 * std::tanh(xv[i] / 30.0));
  Tensor x = ref::f32_tensor(xv, {4, 250});
  be_->softcap(x, 30.0f);
  expect_close(ref::to_vector(x), want, 1e-6, 1e-6);
  EXPECT_THROW(be_->softcap(x, 0.0f), Error);
}

TEST_F(OpsTest, GatherRows) {
  const auto xv = ref::random_floats(5 * 9, 61);
  Tensor x = ref::f32_tensor(xv, {5, 9}), out = Tensor::cpu(DType::F32, {3, 9});
  be_->gather_rows(x, {4, 0, 4}, out);
  std::vector<float> want;
  for (int r : {4, 0, 4})
    for (int j = 0; j < 9; ++j) want.push_back(xv[r * 9 + j]);
  expect_close(ref::to_vector(out), want, 0, 0);
  EXPECT_THROW(be_->gather_rows(x, {5, 0, 1}, out), Error);
  EXPECT_THROW(be_->gather_rows(x, {1, 2}, out), Error);
}

}  // namespace
}  // namespace loom
