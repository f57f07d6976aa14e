#include "backend/quant/interleave.h"

#include <cstring>
#include <utility>

#include "backend/quant/gguf_blocks.h"
#include "core/error.h"

namespace loom::quant {
namespace {

constexpr int kLanes = static_cast<int>(kInterleaveRows);

// Chunk c of `chunks` 4-byte chunks: lane i's src[4c .. 4c + 3] at dst[c][4i ..].
template <class T>
void chunks_in(const T* src, int chunks, int lane, T (*dst)[4 * kLanes]) {
  for (int c = 0; c < chunks; ++c) std::memcpy(&dst[c][4 * lane], src + 4 * c, 4);
}
template <class T>
void chunks_out(const T (*src)[4 * kLanes], int chunks, int lane, T* dst) {
  for (int c = 0; c < chunks; ++c) std::memcpy(dst + 4 * c, &src[c][4 * lane], 4);
}

void to_group(const BlockQ8_0& s, int i, BlockQ8_0x16& o) {
  o.d[i] = s.d;
  chunks_in(s.qs, 8, i, o.qs);
}
void from_group(const BlockQ8_0x16& g, int i, BlockQ8_0& o) {
  o.d = g.d[i];
  chunks_out(g.qs, 8, i, o.qs);
}

void to_group(const BlockQ5_0& s, int i, BlockQ5_0x16& o) {
  if (i == 0) std::memset(o.qh, 0, sizeof(o.qh));
  o.d[i] = s.d;
  uint32_t qh;
  std::memcpy(&qh, s.qh, 4);
  chunks_in(s.qs, 4, i, o.qs);
  for (int k = 0; k < 8; ++k) o.qh[k] |= static_cast<uint64_t>((qh >> (4 * k)) & 0xFu) << (4 * i);
}
void from_group(const BlockQ5_0x16& g, int i, BlockQ5_0& o) {
  o.d = g.d[i];
  uint32_t qh = 0;
  chunks_out(g.qs, 4, i, o.qs);
  for (int k = 0; k < 8; ++k) qh |= static_cast<uint32_t>((g.qh[k] >> (4 * i)) & 0xFu) << (4 * k);
  std::memcpy(o.qh, &qh, 4);
}

template <class B, class G>
void k45_in(const B& s, int i, G& o) {
  o.d[i] = s.d;
  o.dmin[i] = s.dmin;
  for (int b = 0; b < 12; ++b) o.scales[b][i] = s.scales[b];
  chunks_in(s.qs, 32, i, o.qs);
}
template <class B, class G>
void k45_out(const G& g, int i, B& o) {
  o.d = g.d[i];
  o.dmin = g.dmin[i];
  for (int b = 0; b < 12; ++b) o.scales[b] = g.scales[b][i];
  chunks_out(g.qs, 32, i, o.qs);
}
void to_group(const BlockQ4_K& s, int i, BlockQ4_Kx16& o) {
  k45_in(s, i, o);
}
void from_group(const BlockQ4_Kx16& g, int i, BlockQ4_K& o) {
  k45_out(g, i, o);
}
void to_group(const BlockQ5_K& s, int i, BlockQ5_Kx16& o) {
  k45_in(s, i, o);
  chunks_in(s.qh, 8, i, o.qh);
}
void from_group(const BlockQ5_Kx16& g, int i, BlockQ5_K& o) {
  k45_out(g, i, o);
  chunks_out(g.qh, 8, i, o.qh);
}

void to_group(const BlockQ6_K& s, int i, BlockQ6_Kx16& o) {
  o.d[i] = s.d;
  for (int j = 0; j < 16; ++j) o.scales[j][i] = s.scales[j];
  chunks_in(s.ql, 32, i, o.ql);
  chunks_in(s.qh, 16, i, o.qh);
}
void from_group(const BlockQ6_Kx16& g, int i, BlockQ6_K& o) {
  o.d = g.d[i];
  for (int j = 0; j < 16; ++j) o.scales[j] = g.scales[j][i];
  chunks_out(g.ql, 32, i, o.ql);
  chunks_out(g.qh, 16, i, o.qh);
}

template <class Block, class Group>
void interleave_typed(const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
  auto* out = reinterpret_cast<Group*>(dst);
  const int64_t nb = row_bytes / static_cast<int64_t>(sizeof(Block));
  for (int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < kLanes; ++i)
      to_group(reinterpret_cast<const Block*>(src + i * row_bytes)[b], i, out[b]);
}

template <class Block, class Group>
void deinterleave_typed(const uint8_t* group, int lane, int64_t b0, int64_t b1, uint8_t* dst) {
  const auto* g = reinterpret_cast<const Group*>(group);
  auto* out = reinterpret_cast<Block*>(dst);
  for (int64_t b = b0; b < b1; ++b) from_group(g[b], lane, out[b - b0]);
}

// The pairs (plain type, interleaved type).
constexpr std::pair<DType, DType> kPairs[] = {{DType::Q8_0, DType::Q8_0_R16},
                                              {DType::Q5_0, DType::Q5_0_R16},
                                              {DType::Q4_K, DType::Q4_K_R16},
                                              {DType::Q5_K, DType::Q5_K_R16},
                                              {DType::Q6_K, DType::Q6_K_R16}};

// fn(Block{}, Group{}) for the interleaved type `type`.
template <class Fn>
void with_group(DType type, const char* what, Fn&& fn) {
  switch (type) {
    case DType::Q8_0_R16:
      return fn(BlockQ8_0{}, BlockQ8_0x16{});
    case DType::Q5_0_R16:
      return fn(BlockQ5_0{}, BlockQ5_0x16{});
    case DType::Q4_K_R16:
      return fn(BlockQ4_K{}, BlockQ4_Kx16{});
    case DType::Q5_K_R16:
      return fn(BlockQ5_K{}, BlockQ5_Kx16{});
    case DType::Q6_K_R16:
      return fn(BlockQ6_K{}, BlockQ6_Kx16{});
    default:
      LOOM_THROW("{}: {} is not an interleaved type", what, dtype_name(type));
  }
}

}  // namespace

DType interleaved_type(DType type) {
  for (const auto& [plain, r8] : kPairs)
    if (plain == type) return r8;
  return type;
}

DType plain_type(DType type) {
  for (const auto& [plain, r8] : kPairs)
    if (r8 == type) return plain;
  return type;
}

bool is_interleaved(DType type) {
  return plain_type(type) != type;
}

void interleave_group(DType type, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
  with_group(type, "interleave_group", [&](auto block, auto group) {
    interleave_typed<decltype(block), decltype(group)>(src, row_bytes, dst);
  });
}

void deinterleave_row(DType type, const uint8_t* group, int lane, int64_t b0, int64_t b1,
                      uint8_t* dst) {
  LOOM_CHECK(lane >= 0 && lane < kLanes, "deinterleave_row: lane {} out of [0, {})", lane, kLanes);
  with_group(type, "deinterleave_row", [&](auto block, auto g) {
    deinterleave_typed<decltype(block), decltype(g)>(group, lane, b0, b1, dst);
  });
}

}  // namespace loom::quant
