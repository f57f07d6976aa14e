// Tensor-parallel shard planning and weight slicing (model/sharding.h), on an
// in-memory WeightSource: head / KV-head / MLP / vocabulary ranges per rank,
// row and column slices byte for byte (quantised Q8_0 columns on block
// boundaries), FP8 scales sliced with their weights, and the refusals
// (indivisible heads, a quantised column slice that would cut a block, FP8
// block scales cut mid-block).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/error.h"
#include "model/loader/weights.h"
#include "model/sharding.h"

namespace loom {
namespace {

class MapWeights final : public WeightSource {
 public:
  std::optional<Tensor> find(const std::string& name) const override {
    auto it = t.find(name);
    if (it == t.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, _] : t) out.push_back(n);
    return out;
  }
  std::map<std::string, Tensor> t;
};

Tensor filled(DType dtype, std::vector<int64_t> shape) {
  Tensor x = Tensor::cpu(dtype, std::move(shape));
  auto* p = static_cast<uint8_t*>(x.data());
  for (int64_t i = 0; i < x.nbytes(); ++i) p[i] = uint8_t(i * 7 + 3);
  return x;
}

// f32 values 0, 1, 2, ...: every element tells where it came from.
Tensor counting(std::vector<int64_t> shape) {
  Tensor x = Tensor::cpu(DType::F32, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i);
  return x;
}

ModelConfig config(int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 1;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  return c;
}

// Asking `w` for `name` throws loom::Error whose message contains `reason`.
void expect_refusal(const WeightSource& w, const std::string& name, const std::string& reason) {
  try {
    w.get(name);
    ADD_FAILURE() << "expected a refusal of " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(Sharding, PlansHeadsAndColumns) {
  const TensorParallelShard s = plan_tensor_parallel(config(4, 2), 1, 2);
  EXPECT_EQ(s.heads_begin, 2);
  EXPECT_EQ(s.num_heads, 2);
  EXPECT_EQ(s.kv_heads_begin, 1);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_FALSE(s.kv_replicated);
  EXPECT_EQ(s.inter_begin, 64);
  EXPECT_EQ(s.inter_size, 64);
  EXPECT_TRUE(s.vocab_parallel);
  EXPECT_EQ(s.vocab_begin, 128);
}

TEST(Sharding, ReplicatesKvHeadsWhenFewerThanRanks) {
  // 8 query heads, 2 KV heads, 4 ranks: ranks 0-1 read KV head 0, 2-3 head 1.
  for (int r = 0; r < 4; ++r) {
    const TensorParallelShard s = plan_tensor_parallel(config(8, 2), r, 4);
    EXPECT_TRUE(s.kv_replicated);
    EXPECT_EQ(s.num_kv_heads, 1);
    EXPECT_EQ(s.kv_heads_begin, r / 2) << r;
    // Every query head of the rank maps to that KV head (group size 4).
    for (int64_t h = s.heads_begin; h < s.heads_begin + s.num_heads; ++h)
      EXPECT_EQ(h / 4, s.kv_heads_begin);
  }
}

TEST(Sharding, RefusesIndivisibleLayouts) {
  EXPECT_THROW(plan_tensor_parallel(config(6, 6), 0, 4), Error);   // 6 heads over 4
  EXPECT_THROW(plan_tensor_parallel(config(12, 3), 0, 4), Error);  // KV 3 vs 4 ranks
}

TEST(Sharding, SlicesRowsColumnsAndVocabulary) {
  const ModelConfig c = config(4, 2);
  MapWeights w;
  w.t["blk.0.attn_q.weight"] = filled(DType::F32, {64, 64});
  w.t["blk.0.attn_q.bias"] = filled(DType::F32, {64});
  w.t["blk.0.attn_output.weight"] = filled(DType::Q8_0, {64, 64});
  w.t["blk.0.attn_output.bias"] = filled(DType::F32, {64});
  w.t["blk.0.ffn_down.weight"] = filled(DType::F16, {64, 128});
  w.t["token_embd.weight"] = filled(DType::F32, {256, 64});
  w.t["blk.0.attn_norm.weight"] = filled(DType::F32, {64});
  const TensorParallelShard s = plan_tensor_parallel(c, 1, 2);
  auto sw = shard_weights(w, c, s);

  const Tensor q = sw->get("blk.0.attn_q.weight", {32, 64});
  EXPECT_EQ(q.data(), w.t["blk.0.attn_q.weight"].slice_rows(32, 32).data());  // a view
  EXPECT_EQ(sw->get("blk.0.attn_q.bias", {32}).data_as<float>()[0],
            w.t["blk.0.attn_q.bias"].data_as<float>()[32]);

  // Q8_0 rows of 64 values = 2 blocks of 34 bytes; rank 1 takes the second.
  const Tensor o = sw->get("blk.0.attn_output.weight", {64, 32});
  const Tensor o_full = w.t["blk.0.attn_output.weight"];
  for (int64_t r = 0; r < 64; ++r)
    EXPECT_EQ(0, std::memcmp(static_cast<uint8_t*>(o.data()) + r * 34,
                             static_cast<uint8_t*>(o_full.data()) + r * 68 + 34, 34));
  EXPECT_FALSE(sw->find("blk.0.attn_output.bias"));  // rank 0 adds it once

  const Tensor d = sw->get("blk.0.ffn_down.weight", {64, 64});
  EXPECT_EQ(d.data_as<uint16_t>()[65],
            w.t["blk.0.ffn_down.weight"].data_as<uint16_t>()[128 + 64 + 1]);

  const Tensor e = sw->get("token_embd.weight", {129, 64});
  EXPECT_EQ(
      0, std::memcmp(e.data(), w.t["token_embd.weight"].slice_rows(128, 128).data(), 128 * 64 * 4));
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(e.data_as<float>()[128 * 64 + i], 0.0f);  // zero row

  EXPECT_EQ(sw->get("blk.0.attn_norm.weight").data(), w.t["blk.0.attn_norm.weight"].data());
}

TEST(Sharding, RefusesColumnSlicesThatCutQuantisedBlocks) {
  ModelConfig c = config(4, 2);
  c.hidden_size = 256;
  c.intermediate_size = 256;
  MapWeights w;
  w.t["blk.0.ffn_down.weight"] = filled(DType::Q4_K, {256, 256});  // one 256-value block per row
  auto sw = shard_weights(w, c, plan_tensor_parallel(c, 0, 2));
  expect_refusal(*sw, "blk.0.ffn_down.weight", "block boundaries");
}

// FP8 scales follow their weight's slice: per-channel scales with the rows
// of column-parallel layers (every rank's for row-parallel ones), per-tensor
// and static input scales on every rank, 128x128-block scales by block rows
// or columns, KV cache scales per KV head by the rank's heads.
TEST(Sharding, SlicesFp8ScalesWithTheirWeights) {
  ModelConfig c = config(4, 2);
  c.quantization.fp8 = true;
  c.quantization.weight_scale = Fp8WeightScale::Channel;
  MapWeights w;
  w.t["blk.0.attn_k.weight"] = filled(DType::F8_E4M3, {32, 64});
  w.t["blk.0.attn_k.weight_scale"] = counting({32, 1});
  w.t["blk.0.ffn_up.weight_scale"] = counting({128});
  w.t["blk.0.ffn_down.weight_scale"] = counting({64, 1});
  w.t["blk.0.ffn_down.input_scale"] = counting({1});
  w.t["blk.0.kv_cache.k_scale"] = counting({2});
  w.t["blk.0.kv_cache.v_scale"] = counting({1});
  const TensorParallelShard s = plan_tensor_parallel(c, 1, 2);
  auto sw = shard_weights(w, c, s);
  auto f32 = [](const Tensor& t, int64_t i) { return t.data_as<float>()[i]; };

  EXPECT_EQ(sw->get("blk.0.attn_k.weight", {16, 64}).data(),
            w.t["blk.0.attn_k.weight"].slice_rows(16, 16).data());
  const Tensor k_scale = sw->get("blk.0.attn_k.weight_scale");
  ASSERT_EQ(k_scale.numel(), 16);
  EXPECT_EQ(f32(k_scale, 0), f32(w.t["blk.0.attn_k.weight_scale"], 16));
  const Tensor up_scale = sw->get("blk.0.ffn_up.weight_scale");
  ASSERT_EQ(up_scale.numel(), 64);
  EXPECT_EQ(f32(up_scale, 5), f32(w.t["blk.0.ffn_up.weight_scale"], 69));
  // Row-parallel: every output row is on every rank, and so are its scales.
  EXPECT_EQ(sw->get("blk.0.ffn_down.weight_scale").numel(), 64);
  EXPECT_EQ(sw->get("blk.0.ffn_down.input_scale").numel(), 1);
  const Tensor kv = sw->get("blk.0.kv_cache.k_scale");
  ASSERT_EQ(kv.numel(), 1);  // KV head 1 of 2
  EXPECT_EQ(f32(kv, 0), f32(w.t["blk.0.kv_cache.k_scale"], 1));
  EXPECT_EQ(sw->get("blk.0.kv_cache.v_scale").numel(), 1);

  // Fewer KV heads than ranks: ranks 2-3 of 4 hold KV head 1, and its scales.
  const TensorParallelShard r3 = plan_tensor_parallel(config(4, 2), 3, 4);
  ASSERT_TRUE(r3.kv_replicated);
  auto s3 = shard_weights(w, c, r3);
  const Tensor k3 = s3->get("blk.0.attn_k.weight_scale");
  ASSERT_EQ(k3.numel(), 16);
  EXPECT_EQ(f32(k3, 0), 16.0f);
  EXPECT_EQ(f32(s3->get("blk.0.kv_cache.k_scale"), 0), 1.0f);

  // Per-tensor weight scales: every rank's.
  c.quantization.weight_scale = Fp8WeightScale::Tensor;
  MapWeights wt;
  wt.t["blk.0.attn_q.weight_scale"] = counting({1});
  wt.t["blk.0.attn_output.weight_scale"] = counting({1});
  auto st = shard_weights(wt, c, s);
  EXPECT_EQ(st->get("blk.0.attn_q.weight_scale").numel(), 1);
  EXPECT_EQ(st->get("blk.0.attn_output.weight_scale").numel(), 1);
}

TEST(Sharding, SlicesFp8BlockScalesOnBlockBoundaries) {
  // 8 heads of 64 (q: 512 rows), 4 KV heads, MLP 768 = 6 blocks of 128.
  ModelConfig c = config(8, 4);
  c.head_dim = 64;
  c.hidden_size = 512;
  c.intermediate_size = 768;
  c.quantization.fp8 = true;
  c.quantization.weight_scale = Fp8WeightScale::Block;
  c.quantization.block_n = c.quantization.block_k = 128;
  MapWeights w;
  w.t["blk.0.attn_q.weight_scale"] = counting({4, 4});    // [512 / 128, 512 / 128]
  w.t["blk.0.ffn_down.weight_scale"] = counting({4, 6});  // [512, 768] in blocks
  auto sw = shard_weights(w, c, plan_tensor_parallel(c, 1, 2));
  auto f32 = [](const Tensor& t, int64_t i) { return t.data_as<float>()[i]; };
  const Tensor q = sw->get("blk.0.attn_q.weight_scale", {2, 4});  // block rows 2-3
  EXPECT_EQ(f32(q, 0), f32(w.t["blk.0.attn_q.weight_scale"], 8));
  const Tensor d = sw->get("blk.0.ffn_down.weight_scale", {4, 3});  // block columns 3-5
  EXPECT_EQ(f32(d, 0), f32(w.t["blk.0.ffn_down.weight_scale"], 3));
  EXPECT_EQ(f32(d, 4), f32(w.t["blk.0.ffn_down.weight_scale"], 6 + 4));

  // 4 ranks: the MLP's 192-column slices cut its scale blocks.
  auto s4 = shard_weights(w, c, plan_tensor_parallel(c, 1, 4));
  expect_refusal(*s4, "blk.0.ffn_down.weight_scale", "scale blocks");
  // An unknown tensor of a sliced layer is refused, not handed out whole.
  w.t["blk.0.attn_q.output_zero_point"] = counting({1});
  EXPECT_THROW(sw->get("blk.0.attn_q.output_zero_point"), Error);
}

}  // namespace
}  // namespace loom
