// Direct tests of the ops that carry a step's tokens and copy device memory,
// written once for any backend: argmax_rows_to, sample_rows_to,
// resolve_token_ids, download_tokens, copy and copy_kv_blocks
// (model/model_runner.h). tests/backend/test_token_ops.cpp runs them on the CPU
// backend, tests/cuda/test_cuda_token_ops.cpp on the CUDA backend. The
// reference is tests/backend/reference.h (ref::argmax_rows, ref::sample_row);
// every result is token ids or bytes, so every comparison is exact (tolerance
// 0). Shapes include one row, one-token vocabularies, vocabularies that are no
// multiple of any block size, rows of only -inf or NaN, and tied maxima.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "model/model_runner.h"
#include "reference.h"

namespace loom::token_ops {

// ---- moving data to and from any backend ----

// `v` (every value representable in `dtype`) as a [rows, vocab] tensor of
// `dtype` on `be`.
inline Tensor upload_floats(Backend& be, DType dtype, const std::vector<float>& v, int64_t rows,
                            int64_t vocab) {
  Tensor t = be.alloc(dtype, {rows, vocab});
  if (v.empty()) return t;
  if (dtype == DType::F32) {
    be.copy_from_host(t, v.data(), v.size() * 4);
    return t;
  }
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    bits[i] = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  be.copy_from_host(t, bits.data(), bits.size() * 2);
  return t;
}

inline Tensor upload_i32(Backend& be, const std::vector<int32_t>& v) {
  Tensor t = be.alloc(DType::I32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) be.copy_from_host(t, v.data(), v.size() * 4);
  return t;
}

inline std::vector<int32_t> download_i32(Backend& be, const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) be.copy_to_host(v.data(), t, v.size() * 4);
  return v;
}

inline std::vector<uint8_t> download_bytes(Backend& be, const Tensor& t) {
  std::vector<uint8_t> v(static_cast<size_t>(t.nbytes()));
  if (!v.empty()) be.copy_to_host(v.data(), t, v.size());
  return v;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Logits with the argmax's hard cases, exact in f32, bf16 and f16: quarter
// steps in [-8, 8] (so maxima tie often), then per row (by r % 8) planted
// ties of the maximum, NaNs around a larger value, only -inf (index 0), only
// NaN (0), NaN and -inf mixed (0), +inf twice (the first), +0 and -0 (equal:
// index 0), or nothing planted.
inline std::vector<float> argmax_logits(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> quarter(-32, 32);
  std::vector<float> v(static_cast<size_t>(rows * vocab));
  for (float& x : v) x = static_cast<float>(quarter(rng)) / 4.0f;
  const float inf = ref::kInfinity, nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = v.data() + r * vocab;
    const auto at = [&] { return static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab)); };
    switch (r % 8) {
      case 0:
        row[at()] = 9.0f, row[at()] = 9.0f, row[at()] = 9.0f;
        break;
      case 1:
        row[at()] = nan, row[at()] = 20.0f, row[at()] = nan;
        break;
      case 2:
        for (int64_t i = 0; i < vocab; ++i) row[i] = -inf;
        break;
      case 3:
        for (int64_t i = 0; i < vocab; ++i) row[i] = nan;
        break;
      case 4:
        for (int64_t i = 0; i < vocab; ++i) row[i] = i % 3 ? nan : -inf;
        break;
      case 5:
        row[vocab - 1] = inf, row[at()] = inf;
        break;
      case 6:
        for (int64_t i = 0; i < vocab; ++i) row[i] = i % 2 ? -0.0f : 0.0f;
        break;
      default:
        break;
    }
  }
  return v;
}

struct Shape {
  int64_t rows, vocab;
};

// ---- the cases ----

// argmax_rows_to writes row r's argmax to ids[r] for every row, as
// argmax_rows returns it; the ids buffer may be longer than the rows.
inline void argmax_rows_to(Backend& be) {
  const Shape shapes[] = {{1, 1},    {1, 7},     {3, 1000},  {5, 1023},
                          {8, 1025}, {2, 32001}, {67, 4099}, {4, 151936}};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const Shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << s.rows << " x " << s.vocab);
      const auto v = argmax_logits(s.rows, s.vocab, static_cast<uint32_t>(s.rows * 131 + s.vocab));
      const Tensor logits = upload_floats(be, dtype, v, s.rows, s.vocab);
      const std::vector<int32_t> want = ref::argmax_rows(v, s.rows, s.vocab);
      Tensor ids = upload_i32(be, std::vector<int32_t>(static_cast<size_t>(s.rows + 3), -7));
      be.argmax_rows_to(logits, ids);
      std::vector<int32_t> got = download_i32(be, ids);
      got.resize(static_cast<size_t>(s.rows));
      EXPECT_EQ(got, want);
      std::vector<int32_t> host;
      be.argmax_rows(logits, host);
      EXPECT_EQ(host, want) << "argmax_rows";
    }
  // No rows: nothing written.
  Tensor ids = upload_i32(be, {4, 5});
  be.argmax_rows_to(be.alloc(DType::F32, {0, 10}), ids);
  EXPECT_EQ(download_i32(be, ids), (std::vector<int32_t>{4, 5}));
  // An ids buffer shorter than the rows is refused.
  Tensor short_ids = upload_i32(be, {0});
  EXPECT_THROW(be.argmax_rows_to(upload_floats(be, DType::F32, {1, 2, 3, 4}, 2, 2), short_ids),
               Error);
}

// sample_rows_to: with a device sampler, row spec.row gets the spec's draw
// (ref::sample_row) and the other rows keep what argmax_rows_to wrote there;
// without one it returns false and writes nothing.
inline void sample_rows_to(Backend& be) {
  std::mt19937_64 rng(17);
  if (!be.has_device_sampler()) {
    const auto v = ref::random_logits(3, 50, rng);
    const Tensor logits = upload_floats(be, DType::F32, v, 3, 50);
    Tensor ids = upload_i32(be, {11, 12, 13});
    std::vector<LogitEdit> edits;
    const auto specs = ref::random_specs(2, 3, 50, rng, edits);
    EXPECT_FALSE(be.sample_rows_to(logits, specs, edits, ids));
    EXPECT_EQ(download_i32(be, ids), (std::vector<int32_t>{11, 12, 13}));
    std::vector<int32_t> out;
    EXPECT_FALSE(be.sample_rows(logits, specs, edits, out));
    return;
  }
  const Shape shapes[] = {{1, 1}, {1, 7}, {5, 1001}, {16, 32000}, {3, 151936}};
  for (DType dtype : {DType::BF16, DType::F32, DType::F16})
    for (const Shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << s.rows << " x " << s.vocab);
      auto v =
          ref::random_logits(s.rows, s.vocab, rng);  // ties, -inf, NaN, rows without candidates
      if (dtype == DType::F16)  // what the device holds (tiny values lose bits as f16 subnormals)
        for (float& x : v) x = f16_to_f32(f32_to_f16(x));
      const Tensor logits = upload_floats(be, dtype, v, s.rows, s.vocab);
      std::vector<LogitEdit> edits;
      std::vector<SampleSpec> drawn =
          ref::random_specs(static_cast<size_t>(s.rows), s.rows, s.vocab, rng, edits);
      // One spec per row, except every third row (greedy: argmax_rows_to's id stays).
      std::vector<SampleSpec> specs;
      for (int32_t r = 0; r < s.rows; ++r) {
        if (s.rows > 1 && r % 3 == 2) continue;
        drawn[static_cast<size_t>(r)].row = r;
        specs.push_back(drawn[static_cast<size_t>(r)]);
      }
      std::vector<int32_t> want = ref::argmax_rows(v, s.rows, s.vocab);
      for (const SampleSpec& sp : specs)
        want[static_cast<size_t>(sp.row)] =
            ref::sample_row(v.data() + sp.row * s.vocab, s.vocab, sp, edits).token;
      Tensor ids = be.alloc(DType::I32, {s.rows});
      be.argmax_rows_to(logits, ids);
      EXPECT_TRUE(be.sample_rows_to(logits, specs, edits, ids));
      EXPECT_EQ(download_i32(be, ids), want);
    }
  // No specs: nothing written.
  const auto v = ref::random_logits(2, 9, rng);
  Tensor ids = upload_i32(be, {3, 4});
  EXPECT_TRUE(be.sample_rows_to(upload_floats(be, DType::F32, v, 2, 9), {}, {}, ids));
  EXPECT_EQ(download_i32(be, ids), (std::vector<int32_t>{3, 4}));
}

// resolve_token_ids: ids[i] < 0 becomes src[-ids[i] - 1]; the others stay.
inline void resolve_token_ids(Backend& be) {
  struct Case {
    std::vector<int32_t> ids, src;
  };
  std::vector<Case> cases = {
      {{-1}, {42}},                                  // one id, resolved
      {{7}, {42}},                                   // one id, kept
      {{5, -1, 7, -3, -2, 0, -1}, {100, 101, 102}},  // mixed, a source row used twice
      {{-2, -1}, {8, 9}},                            // all resolved, reversed
  };
  std::mt19937 rng(5);
  Case big;  // a step's worth of ids, more than one block of threads
  big.src.resize(300);
  for (size_t i = 0; i < big.src.size(); ++i) big.src[i] = static_cast<int32_t>(1000 + i);
  for (int i = 0; i < 5000; ++i)
    big.ids.push_back(rng() % 2 ? static_cast<int32_t>(rng() % 100000)
                                : -static_cast<int32_t>(1 + rng() % big.src.size()));
  cases.push_back(big);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.ids.size() << " ids");
    std::vector<int32_t> want = c.ids;
    for (int32_t& id : want)
      if (id < 0) id = c.src[static_cast<size_t>(-int64_t{id} - 1)];
    Tensor ids = upload_i32(be, c.ids);
    be.resolve_token_ids(ids, upload_i32(be, c.src));
    EXPECT_EQ(download_i32(be, ids), want);
  }
}

// download_tokens: wait() gives ids[0, n) as they were when the download was
// issued, also after the buffer was rewritten, for several downloads in
// flight waited in any order, and again on a second wait().
inline void download_tokens(Backend& be) {
  std::vector<int32_t> first(37);
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int32_t>(i * 7 % 37);
  Tensor ids = upload_i32(be, first);
  auto all = be.download_tokens(ids, 37);
  auto some = be.download_tokens(ids, 3);
  auto none = be.download_tokens(ids, 0);
  auto dropped = be.download_tokens(ids, 10);  // destroyed without a wait
  dropped.reset();
  std::vector<int32_t> second(37, -1);
  be.copy_from_host(ids, second.data(), second.size() * 4);  // the next step's ids
  auto later = be.download_tokens(ids, 5);
  EXPECT_EQ(later->wait(), std::vector<int32_t>(5, -1));
  EXPECT_EQ(some->wait(), std::vector<int32_t>(first.begin(), first.begin() + 3));
  EXPECT_TRUE(none->wait().empty());
  EXPECT_EQ(all->wait(), first);
  EXPECT_EQ(all->wait(), first);
  // Many in flight (more than a pool would start with), waited last first.
  std::vector<std::unique_ptr<Backend::TokenDownload>> inflight;
  for (int32_t k = 0; k < 20; ++k) {
    const std::vector<int32_t> step(6, k);
    be.copy_from_host(ids, step.data(), step.size() * 4);
    inflight.push_back(be.download_tokens(ids, 6));
  }
  for (int32_t k = 19; k >= 0; --k)
    EXPECT_EQ(inflight[static_cast<size_t>(k)]->wait(), std::vector<int32_t>(6, k)) << k;
  EXPECT_THROW(be.download_tokens(ids, 38), Error);
  EXPECT_THROW(be.download_tokens(ids, -1), Error);
}

// copy: dst's bytes become src's, for whole tensors and row slices (a KV
// block), any dtype the backend holds; dtype or size mismatches are refused.
inline void copy(Backend& be, const std::vector<DType>& dtypes) {
  uint32_t seed = 1;
  for (DType dtype : dtypes)
    for (const Shape& s : std::vector<Shape>{{1, 1}, {1, 3}, {7, 33}, {64, 1000}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << s.rows << " x " << s.vocab);
      Tensor src = be.alloc(dtype, {s.rows, s.vocab});
      Tensor dst = be.alloc(dtype, {s.rows, s.vocab});
      const auto bytes = random_bytes(static_cast<size_t>(src.nbytes()), seed++);
      be.copy_from_host(src, bytes.data(), bytes.size());
      be.copy(dst, src);
      EXPECT_EQ(download_bytes(be, dst), bytes);
      if (s.rows < 3) continue;
      // Row 0 into row 2 (slices of the same tensor, as KV blocks are).
      Tensor to = dst.slice_rows(2, 1);
      be.copy(to, dst.slice_rows(0, 1));
      std::vector<uint8_t> want = bytes;
      const size_t row = static_cast<size_t>(src.row_stride_bytes());
      std::memcpy(want.data() + 2 * row, want.data(), row);
      EXPECT_EQ(download_bytes(be, dst), want);
    }
  Tensor a = be.alloc(DType::F32, {4}), b = be.alloc(DType::I32, {4}),
         c = be.alloc(DType::F32, {5});
  EXPECT_THROW(be.copy(a, b), Error);
  EXPECT_THROW(be.copy(a, c), Error);
  Tensor empty_dst = be.alloc(DType::F32, {0}), empty_src = be.alloc(DType::F32, {0});
  be.copy(empty_dst, empty_src);  // nothing to do
}

// copy_kv_blocks: block src's K and V become block dst's in every layer; the
// other blocks keep their bytes.
inline void copy_kv_blocks(Backend& be, DType kv_dtype) {
  for (int64_t block_size : {1, 5, 16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(kv_dtype) << " block size " << block_size);
    KvCache cache;
    cache.num_blocks = 7;
    cache.block_size = block_size;
    cache.dtype = kv_dtype;
    std::vector<std::vector<uint8_t>> want;  // per layer: K then V
    uint32_t seed = 100;
    for (int layer = 0; layer < 3; ++layer) {
      KvLayerCache l{be.alloc(kv_dtype, {7, block_size, 2, 8}),
                     be.alloc(kv_dtype, {7, block_size, 2, 8})};
      for (Tensor* t : {&l.k, &l.v}) {
        want.push_back(random_bytes(static_cast<size_t>(t->nbytes()), seed++));
        be.copy_from_host(*t, want.back().data(), want.back().size());
      }
      cache.layers.push_back(l);
    }
    const std::vector<KvBlockCopy> copies = {{0, 3}, {2, 6}, {5, 1}};
    loom::copy_kv_blocks(be, copies, cache);
    const size_t block_bytes = static_cast<size_t>(cache.layers[0].k.nbytes() / 7);
    for (auto& bytes : want)
      for (const KvBlockCopy& c : copies)
        std::memcpy(bytes.data() + c.dst * block_bytes, bytes.data() + c.src * block_bytes,
                    block_bytes);
    for (size_t layer = 0; layer < cache.layers.size(); ++layer) {
      EXPECT_EQ(download_bytes(be, cache.layers[layer].k), want[2 * layer]) << "K, layer " << layer;
      EXPECT_EQ(download_bytes(be, cache.layers[layer].v), want[2 * layer + 1])
          << "V, layer " << layer;
    }
    loom::copy_kv_blocks(be, {}, cache);  // no copies: nothing changes
    EXPECT_EQ(download_bytes(be, cache.layers[2].v), want[5]);
  }
}

}  // namespace loom::token_ops
