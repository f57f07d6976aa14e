// Weights interleaved by 16 rows (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K;
// quant/interleave.h), as the CPU backend prepares them: the layout round-trips bit for bit, and every op that
// reads such a weight (the row path, the GEMM for any M, embedding lookups,
// row slices) gives exactly the bits the plain weight gives, under every
// instruction set this CPU has.
#include <cstring>

#include "backend/quant/interleave.h"
#include "reference.h"

namespace loom {
namespace {

constexpr DType kTypes[] = {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

TEST(Interleave, RoundTripsEveryRow) {
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t g = quant::kInterleaveRows, n = 2 * g, k = 3 * dtype_info(t).block_elems;
    const ref::Weight w = ref::make_weight(t, ref::random_floats(n * k, 7), n, k);
    const DType r16 = quant::interleaved_type(t);
    ASSERT_TRUE(quant::is_interleaved(r16));
    EXPECT_EQ(quant::plain_type(r16), t);
    const int64_t rb = w.tensor.row_stride_bytes(), nb = k / dtype_info(t).block_elems;
    std::vector<uint8_t> packed(static_cast<size_t>(n * rb)), row(static_cast<size_t>(rb));
    const auto* src = static_cast<const uint8_t*>(w.tensor.data());
    for (int64_t i = 0; i < n / g; ++i)
      quant::interleave_group(r16, src + i * g * rb, rb, packed.data() + i * g * rb);
    EXPECT_NE(std::memcmp(packed.data(), src, packed.size()), 0);  // really reordered
    for (int64_t r = 0; r < n; ++r) {
      quant::deinterleave_row(r16, packed.data() + r / g * g * rb, static_cast<int>(r % g), 0, nb,
                              row.data());
      EXPECT_EQ(std::memcmp(row.data(), src + r * rb, static_cast<size_t>(rb)), 0) << "row " << r;
      // A range of blocks alone.
      quant::deinterleave_row(r16, packed.data() + r / g * g * rb, static_cast<int>(r % g), 1, 2,
                              row.data());
      EXPECT_EQ(std::memcmp(row.data(), src + r * rb + rb / nb, static_cast<size_t>(rb / nb)), 0);
    }
  }
}

TEST(Interleave, OnlyWholeGroupsOfQ8AndQ5) {
  auto be = make_cpu_backend(2);
  const ref::Weight q5 = ref::make_weight(DType::Q5_0, ref::random_floats(32 * 64, 1), 32, 64);
  EXPECT_EQ(be->prepare_weight(q5.tensor).dtype(), DType::Q5_0_R16);
  const ref::Weight q8 = ref::make_weight(DType::Q8_0, ref::random_floats(48 * 64, 2), 48, 64);
  EXPECT_EQ(be->prepare_weight(q8.tensor).dtype(), DType::Q8_0_R16);
  // Rows not a multiple of 16, types with no interleaved form: as they are.
  const ref::Weight odd = ref::make_weight(DType::Q5_0, ref::random_floats(24 * 64, 3), 24, 64);
  EXPECT_EQ(be->prepare_weight(odd.tensor).data(), odd.tensor.data());
  const ref::Weight q4 = ref::make_weight(DType::Q4_0, ref::random_floats(16 * 64, 4), 16, 64);
  EXPECT_EQ(be->prepare_weight(q4.tensor).data(), q4.tensor.data());
  for (DType t : kTypes) {
    const int64_t k = dtype_info(t).block_elems;
    const ref::Weight w = ref::make_weight(t, ref::random_floats(16 * k, 5), 16, k);
    EXPECT_EQ(be->prepare_weight(w.tensor).dtype(), quant::interleaved_type(t));
  }
  // A row slice of an interleaved tensor starts at a group.
  const Tensor p = be->prepare_weight(q5.tensor);
  EXPECT_NO_THROW(p.slice_rows(16, 5));
  EXPECT_THROW(p.slice_rows(8, 5), Error);
}

// out = x . w^T for the plain weight and for its interleaved copy (and the
// copy's row slice [0, rows)), for M = 1 .. 40 under every ISA: the same bits.
void check_same_bits(Backend& be, DType type, int64_t n, int64_t k, int64_t rows, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(type) << " N=" << n << " K=" << k << " rows=" << rows);
  const ref::Weight w = ref::make_weight(type, ref::random_floats(n * k, seed), n, k);
  const Tensor r16_full = be.prepare_weight(w.tensor);
  ASSERT_EQ(r16_full.dtype(), quant::interleaved_type(type));
  const Tensor plain = w.tensor.slice_rows(0, rows), r16 = r16_full.slice_rows(0, rows);
  Tensor bias = ref::f32_tensor(ref::random_floats(rows, seed + 2), {rows});
  ref::for_each_isa([&](cpu::Isa) {
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 13, 24, 40}) {
      Tensor x = ref::f32_tensor(ref::random_floats(m * k, seed + 1, -2.0f, 2.0f), {m, k});
      Tensor a = Tensor::cpu(DType::F32, {m, rows}), b = Tensor::cpu(DType::F32, {m, rows});
      be.matmul(x, plain, m % 2 ? &bias : nullptr, a);
      be.matmul(x, r16, m % 2 ? &bias : nullptr, b);
      ASSERT_EQ(bytes_of(a), bytes_of(b)) << "M=" << m;
    }
    // Several weights of one x (q, k, v; gate, up) in one pass.
    Tensor x = ref::f32_tensor(ref::random_floats(3 * k, seed + 5), {3, k});
    Tensor a1 = Tensor::cpu(DType::F32, {3, rows}), a2 = Tensor::cpu(DType::F32, {3, rows});
    Tensor b1 = Tensor::cpu(DType::F32, {3, rows}), b2 = Tensor::cpu(DType::F32, {3, rows});
    LinearWeight lp, lr;
    lp.weight = plain;
    lr.weight = r16;
    be.linear_many(x, {{&lp, nullptr, &a1}, {&lr, nullptr, &b1}});
    be.linear_many(x, {{&lr, nullptr, &b2}, {&lp, nullptr, &a2}});
    EXPECT_EQ(bytes_of(a1), bytes_of(b1));
    EXPECT_EQ(bytes_of(a2), bytes_of(b2));
    EXPECT_EQ(bytes_of(a1), bytes_of(a2));
  });
  // Embedding lookups of every row.
  std::vector<int32_t> ids;
  for (int64_t r = rows - 1; r >= 0; --r) ids.push_back(static_cast<int32_t>(r));
  Tensor id = Tensor::cpu(DType::I32, {rows});
  std::memcpy(id.data(), ids.data(), ids.size() * 4);
  Tensor ea = Tensor::cpu(DType::F32, {rows, k}), eb = Tensor::cpu(DType::F32, {rows, k});
  be.embedding(plain, id, 0.5f, ea);
  be.embedding(r16, id, 0.5f, eb);
  EXPECT_EQ(bytes_of(ea), bytes_of(eb));
}

// K past the GEMM's K chunk (1,024 values) and not a multiple of it; N past a
// few GEMM panels; slices ending inside a group.
TEST(Interleave, SameBitsAsThePlainWeight) {
  auto be = make_cpu_backend(2);
  uint32_t seed = 11;
  for (DType t : kTypes) {
    const int64_t unit = dtype_info(t).block_elems;
    check_same_bits(*be, t, 80, 1280, 80, seed);
    check_same_bits(*be, t, 80, 1280, 69, seed + 10);
    check_same_bits(*be, t, 16, 3 * unit, 11, seed + 20);
    check_same_bits(*be, t, 16, unit, 16, seed + 30);
    check_same_bits(*be, t, 32, 2 * unit, 7, seed + 40);  // ends in the first half of a group
    seed += 100;
  }
}

}  // namespace
}  // namespace loom
