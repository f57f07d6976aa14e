// write_kv and paged_attention against the reference, on every ISA.
// Batches mix a fresh single-token prompt, decodes over long cached contexts,
// prefill chunks continuing a cached prefix and whole prompts; blocks are
// shuffled so sequences cross physical block boundaries in any order.
// Tolerance: outputs are convex combinations of V rows (|v| <= 1), computed with
// an f32 online softmax vs a double reference: |err| <= 3e-5 absolute.
// K/V in f16/bf16 caches are compared against the reference fed the same
// rounded values; write_kv itself is exact (f32) or exactly rounded (f16/bf16).
// FP8 E4M3 caches hold fp8(x / scale) with a scale per KV head: the reference
// gets the dequantised values fp8 * scale.
#include <numeric>

#include "core/fp8.h"
#include "reference.h"

namespace loom {
namespace {

// The scale of KV head h in FP8 test caches: random values in [-1, 1] then
// use E4M3's range (up to +-448) at different exponents per head.
float fp8_head_scale(int h) {
  return 1.0f / (300.0f + 70.0f * static_cast<float>(h));
}

float round_to(DType t, float v, int head) {
  if (t == DType::F16) return f16_to_f32(f32_to_f16(v));
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::F8_E4M3) {
    const float s = fp8_head_scale(head);
    return fp8_e4m3_to_f32(f32_to_fp8_e4m3(v * (1.0f / s))) * s;
  }
  return v;
}

struct SeqSpec {
  int ctx;    // tokens in the cache after the step
  int n_new;  // tokens of this step
};

struct Case {
  int heads, kv_heads, hd, block_size;
  DType cache_type;
  AttentionParams params;
};

// Checks paged_attention against the reference on every ISA; `outputs`, when
// given, receives each ISA's output in the order for_each_isa runs them.
void run_case(Backend& be, const Case& c, const std::vector<SeqSpec>& seqs, uint32_t seed,
              std::vector<std::vector<float>>* outputs = nullptr) {
  SCOPED_TRACE(::testing::Message()
               << "heads " << c.heads << "/" << c.kv_heads << " hd " << c.hd << " bs "
               << c.block_size << " " << dtype_name(c.cache_type) << " window "
               << c.params.sliding_window << " softcap " << c.params.logit_softcap);
  const int ns = static_cast<int>(seqs.size());
  int max_blocks = 0, total_blocks = 0;
  for (const auto& s : seqs) {
    const int b = (s.ctx + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, b);
    total_blocks += b;
  }
  const int num_blocks = total_blocks + 3;  // a few never used
  std::vector<int32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(seed));

  KvLayerCache cache{Tensor::cpu(c.cache_type, {num_blocks, c.block_size, c.kv_heads, c.hd}),
                     Tensor::cpu(c.cache_type, {num_blocks, c.block_size, c.kv_heads, c.hd})};
  const int64_t row = int64_t{c.kv_heads} * c.hd;
  if (c.cache_type == DType::F8_E4M3) {
    std::vector<float> scales(static_cast<size_t>(c.kv_heads));
    for (int h = 0; h < c.kv_heads; ++h) scales[static_cast<size_t>(h)] = fp8_head_scale(h);
    cache.k_scale = ref::f32_tensor(scales, {c.kv_heads});
    cache.v_scale = ref::f32_tensor(scales, {c.kv_heads});
  }

  // Logical K/V of each sequence (all ctx positions), rounded to the cache type.
  std::vector<std::vector<float>> k_log(ns), v_log(ns);
  AttentionMetadata prefix, step;  // writes the cached prefixes, then the step
  prefix.num_seqs = step.num_seqs = ns;
  prefix.max_blocks_per_seq = step.max_blocks_per_seq = max_blocks;
  prefix.query_start = step.query_start = {0};
  std::vector<float> k_prefix, v_prefix, k_step, v_step;
  int next = 0;
  for (int s = 0; s < ns; ++s) {
    const auto& sp = seqs[s];
    const int nb = (sp.ctx + c.block_size - 1) / c.block_size;
    std::vector<int32_t> table(max_blocks, 0);
    for (int b = 0; b < nb; ++b) table[b] = physical[next++];
    prefix.block_tables.insert(prefix.block_tables.end(), table.begin(), table.end());
    step.block_tables.insert(step.block_tables.end(), table.begin(), table.end());
    k_log[s] = ref::random_floats(sp.ctx * row, seed * 31 + s);
    v_log[s] = ref::random_floats(sp.ctx * row, seed * 37 + s);
    for (int p = 0; p < sp.ctx; ++p) {
      const bool is_new = p >= sp.ctx - sp.n_new;
      auto& kd = is_new ? k_step : k_prefix;
      auto& vd = is_new ? v_step : v_prefix;
      kd.insert(kd.end(), k_log[s].begin() + p * row, k_log[s].begin() + (p + 1) * row);
      vd.insert(vd.end(), v_log[s].begin() + p * row, v_log[s].begin() + (p + 1) * row);
      const int64_t slot = int64_t{table[p / c.block_size]} * c.block_size + p % c.block_size;
      (is_new ? step : prefix).slot_mapping.push_back(slot);
    }
    for (size_t i = 0; i < k_log[s].size(); ++i) {
      const int head = static_cast<int>(static_cast<int64_t>(i) % row / c.hd);
      k_log[s][i] = round_to(c.cache_type, k_log[s][i], head);
      v_log[s][i] = round_to(c.cache_type, v_log[s][i], head);
    }
    prefix.context_lens.push_back(sp.ctx - sp.n_new);
    step.context_lens.push_back(sp.ctx);
    prefix.query_start.push_back(prefix.query_start.back() + sp.ctx - sp.n_new);
    step.query_start.push_back(step.query_start.back() + sp.n_new);
  }
  const int64_t t_prefix = prefix.query_start.back(), t_step = step.query_start.back();
  be.write_kv(ref::f32_tensor(k_prefix, {t_prefix, c.kv_heads, c.hd}),
              ref::f32_tensor(v_prefix, {t_prefix, c.kv_heads, c.hd}), cache, prefix);
  be.write_kv(ref::f32_tensor(k_step, {t_step, c.kv_heads, c.hd}),
              ref::f32_tensor(v_step, {t_step, c.kv_heads, c.hd}), cache, step);

  // The cache holds exactly the rounded logical values.
  std::vector<float> kc(row);
  for (int s = 0; s < ns; ++s)
    for (int p = 0; p < seqs[s].ctx; p += 7) {
      const int64_t slot = int64_t{step.block_tables[s * max_blocks + p / c.block_size]} * c.block_size +
                           p % c.block_size;
      const uint8_t* bytes =
          static_cast<uint8_t*>(cache.k.data()) + slot * row * dtype_info(c.cache_type).block_bytes;
      if (c.cache_type == DType::F8_E4M3) {
        for (int64_t i = 0; i < row; ++i)
          kc[i] = fp8_e4m3_to_f32(bytes[i]) * fp8_head_scale(static_cast<int>(i / c.hd));
      } else {
        quant::dequantize_row(c.cache_type, bytes, kc.data(), row);
      }
      for (int64_t i = 0; i < row; ++i) ASSERT_EQ(kc[i], k_log[s][p * row + i]) << "seq " << s << " pos " << p;
    }

  const auto qv = ref::random_floats(t_step * c.heads * c.hd, seed + 5, -2, 2);
  Tensor q = ref::f32_tensor(qv, {t_step, c.heads, c.hd});
  std::vector<float> want(qv.size());
  for (int s = 0; s < ns; ++s) {
    const int64_t off = step.query_start[s] * c.heads * c.hd;
    ref::attention(qv.data() + off, k_log[s], v_log[s], seqs[s].ctx, seqs[s].n_new, c.heads,
                   c.kv_heads, c.hd, c.params, want.data() + off);
  }
  ref::for_each_isa([&](cpu::Isa) {
    Tensor out = Tensor::cpu(DType::F32, {t_step, c.heads, c.hd});
    be.paged_attention(q, cache, step, c.params, out);
    const auto got = ref::to_vector(out);
    if (outputs) outputs->push_back(got);
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i)
      if (!(std::fabs(got[i] - want[i]) <= 3e-5)) {
        ADD_FAILURE() << "token " << i / (c.heads * c.hd) << " head " << i / c.hd % c.heads
                      << " dim " << i % c.hd << ": " << got[i] << " != " << want[i];
        ++bad;
      }
  });
}

const std::vector<SeqSpec> kMixed = {
    {1, 1},    // a one-token prompt
    {37, 1},   // decode, context crossing blocks
    {50, 20},  // prefill chunk after a cached prefix of 30
    {16, 16},  // a whole prompt filling one block exactly
    {100, 1},  // long decode
};

class AttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

TEST_F(AttentionTest, MixedBatchGqaHeadSizesCacheTypes) {
  uint32_t seed = 1;
  for (int ratio : {1, 4, 8})
    for (int hd : {64, 128, 256})
      for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3}) {
        AttentionParams p;
        p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        run_case(*be_, {2 * ratio, 2, hd, 16, t, p}, kMixed, seed++);
      }
}

// A long decode alone on 1, 2 and 8 threads (its key chunks split over the
// threads when it has fewer KV heads than there are threads, partials merged
// afterwards) and unsplit in a batch of many
// sequences: the same bits each time, with and without a sliding window.
TEST_F(AttentionTest, SplitDecodeIsBitForBitTheUnsplitOne) {
  for (const AttentionParams& params : {AttentionParams{0.125f, 0, 0.0f}, AttentionParams{0.125f, 300, 30.0f}})
  for (const auto& [heads, kv_heads] : {std::pair{14, 2}, std::pair{8, 1}}) {
    const Case c{heads, kv_heads, 64, 16, DType::F32, params};
    std::vector<SeqSpec> batch = {{700, 1}};
    for (int i = 0; i < 12; ++i) batch.push_back({40 + 9 * i, 1 + i % 3});
    std::vector<std::vector<float>> alone1, alone2, alone8, batched;
    run_case(*make_cpu_backend(1), c, {{700, 1}}, 11, &alone1);
    run_case(*be_, c, {{700, 1}}, 11, &alone2);
    run_case(*make_cpu_backend(8), c, {{700, 1}}, 11, &alone8);
    run_case(*be_, c, batch, 11, &batched);
    ASSERT_EQ(alone1.size(), batched.size());
    const size_t n = static_cast<size_t>(c.heads * c.hd);  // the long decode's one token
    for (size_t isa = 0; isa < alone1.size(); ++isa)
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(alone1[isa][i], alone2[isa][i]) << "isa " << isa << " value " << i;
        ASSERT_EQ(alone1[isa][i], alone8[isa][i]) << "isa " << isa << " value " << i;
        ASSERT_EQ(alone1[isa][i], batched[isa][i]) << "isa " << isa << " value " << i;
      }
  }
}

TEST_F(AttentionTest, SlidingWindowSoftcapOddBlockSize) {
  uint32_t seed = 100;
  for (int window : {0, 1, 8, 20})
    for (float cap : {0.0f, 20.0f})
      for (int bs : {7, 16}) {
        AttentionParams p;
        p.scale = 0.3f;
        p.sliding_window = window;
        p.logit_softcap = cap;
        run_case(*be_, {8, 2, 64, bs, DType::F32, p}, kMixed, seed++);
      }
}

TEST_F(AttentionTest, LongPrefillSingleSequence) {
  AttentionParams p;
  p.scale = 0.125f;
  run_case(*be_, {4, 1, 64, 16, DType::F16, p}, {{300, 300}}, 7);
  p.sliding_window = 64;
  run_case(*be_, {14, 2, 64, 16, DType::BF16, p}, {{200, 150}, {5, 2}}, 8);
}

TEST_F(AttentionTest, Fp8CacheNeedsItsScales) {
  KvLayerCache cache{Tensor::cpu(DType::F8_E4M3, {2, 4, 2, 8}),
                     Tensor::cpu(DType::F8_E4M3, {2, 4, 2, 8})};
  const auto kv = ref::random_floats(2 * 8, 1);
  AttentionMetadata meta;
  meta.slot_mapping = {3};
  Tensor k = ref::f32_tensor(kv, {1, 2, 8});
  EXPECT_THROW(be_->write_kv(k, k, cache, meta), Error);  // no scales
  cache.k_scale = ref::f32_tensor({1.0f}, {1});           // one value for two heads
  cache.v_scale = ref::f32_tensor({1.0f}, {1});
  EXPECT_THROW(be_->write_kv(k, k, cache, meta), Error);
  cache.k_scale = ref::f32_tensor({1.0f, 0.5f}, {2});
  cache.v_scale = ref::f32_tensor({1.0f, 0.5f}, {2});
  be_->write_kv(k, k, cache, meta);
  const auto* bytes = cache.k.data_as<const uint8_t>() + 3 * 16;
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(bytes[i], f32_to_fp8_e4m3(kv[i] * (i < 8 ? 1.0f : 2.0f))) << i;
}

TEST_F(AttentionTest, WriteKvSkipsPaddingAndChecksSlots) {
  KvLayerCache cache{Tensor::cpu(DType::F32, {2, 4, 1, 8}), Tensor::cpu(DType::F32, {2, 4, 1, 8})};
  const auto kv = ref::random_floats(3 * 8, 1);
  Tensor k = ref::f32_tensor(kv, {3, 1, 8});
  AttentionMetadata meta;
  meta.slot_mapping = {5, -1, 0};
  be_->write_kv(k, k, cache, meta);
  const float* c = cache.k.data_as<float>();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(c[5 * 8 + i], kv[i]);
    EXPECT_EQ(c[0 * 8 + i], kv[16 + i]);
  }
  meta.slot_mapping = {5, 8, 0};
  EXPECT_THROW(be_->write_kv(k, k, cache, meta), Error);
}

TEST_F(AttentionTest, RejectsBadMetadata) {
  KvLayerCache cache{Tensor::cpu(DType::F32, {2, 4, 1, 8}), Tensor::cpu(DType::F32, {2, 4, 1, 8})};
  Tensor q = Tensor::cpu(DType::F32, {1, 2, 8}), out = Tensor::cpu(DType::F32, {1, 2, 8});
  AttentionMetadata meta;
  meta.num_seqs = 1;
  meta.query_start = {0, 1};
  meta.context_lens = {5};
  meta.max_blocks_per_seq = 2;
  meta.block_tables = {1, 2};  // block 2 does not exist
  EXPECT_THROW(be_->paged_attention(q, cache, meta, {}, out), Error);
  meta.block_tables = {1, 0};
  meta.context_lens = {9};  // needs 3 blocks
  EXPECT_THROW(be_->paged_attention(q, cache, meta, {}, out), Error);
  meta.context_lens = {5};
  EXPECT_NO_THROW(be_->paged_attention(q, cache, meta, {}, out));
  Tensor q3 = Tensor::cpu(DType::F32, {1, 3, 8}), out3 = Tensor::cpu(DType::F32, {1, 3, 8});
  KvLayerCache cache2{Tensor::cpu(DType::F32, {2, 4, 2, 8}), Tensor::cpu(DType::F32, {2, 4, 2, 8})};
  EXPECT_THROW(be_->paged_attention(q3, cache2, meta, {}, out3), Error);  // 3 heads over 2 kv heads
}

}  // namespace
}  // namespace loom
