#include "backend/quant/interleave.h"

#include <cstring>

#include "backend/quant/gguf_blocks.h"
#include "core/error.h"

namespace loom::quant {
namespace {

void to_x8(const BlockQ8_0* const* rows, int64_t b, BlockQ8_0x8& o) {
  for (int i = 0; i < 8; ++i) {
    const BlockQ8_0& s = rows[i][b];
    o.d[i] = s.d;
    for (int k = 0; k < 8; ++k) std::memcpy(&o.qs[k][4 * i], s.qs + 4 * k, 4);
  }
}

void to_x8(const BlockQ5_0* const* rows, int64_t b, BlockQ5_0x8& o) {
  std::memset(o.qh, 0, sizeof(o.qh));
  for (int i = 0; i < 8; ++i) {
    const BlockQ5_0& s = rows[i][b];
    o.d[i] = s.d;
    uint32_t qh;
    std::memcpy(&qh, s.qh, 4);
    for (int k = 0; k < 4; ++k) std::memcpy(&o.qs[k][4 * i], s.qs + 4 * k, 4);
    for (int k = 0; k < 8; ++k) o.qh[k] |= ((qh >> (4 * k)) & 0xFu) << (4 * i);
  }
}

void from_x8(const BlockQ8_0x8& g, int i, BlockQ8_0& o) {
  o.d = g.d[i];
  for (int k = 0; k < 8; ++k) std::memcpy(o.qs + 4 * k, &g.qs[k][4 * i], 4);
}

void from_x8(const BlockQ5_0x8& g, int i, BlockQ5_0& o) {
  o.d = g.d[i];
  uint32_t qh = 0;
  for (int k = 0; k < 4; ++k) std::memcpy(o.qs + 4 * k, &g.qs[k][4 * i], 4);
  for (int k = 0; k < 8; ++k) qh |= ((g.qh[k] >> (4 * i)) & 0xFu) << (4 * k);
  std::memcpy(o.qh, &qh, 4);
}

template <class Block, class Group>
void interleave_typed(const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
  const Block* rows[8];
  for (int i = 0; i < 8; ++i) rows[i] = reinterpret_cast<const Block*>(src + i * row_bytes);
  auto* out = reinterpret_cast<Group*>(dst);
  const int64_t nb = row_bytes / static_cast<int64_t>(sizeof(Block));
  for (int64_t b = 0; b < nb; ++b) to_x8(rows, b, out[b]);
}

template <class Block, class Group>
void deinterleave_typed(const uint8_t* group, int lane, int64_t b0, int64_t b1, uint8_t* dst) {
  const auto* g = reinterpret_cast<const Group*>(group);
  auto* out = reinterpret_cast<Block*>(dst);
  for (int64_t b = b0; b < b1; ++b) from_x8(g[b], lane, out[b - b0]);
}

}  // namespace

DType interleaved_type(DType type) {
  if (type == DType::Q8_0) return DType::Q8_0_R8;
  if (type == DType::Q5_0) return DType::Q5_0_R8;
  return type;
}

bool is_interleaved(DType type) {
  return type == DType::Q8_0_R8 || type == DType::Q5_0_R8;
}

DType plain_type(DType type) {
  if (type == DType::Q8_0_R8) return DType::Q8_0;
  if (type == DType::Q5_0_R8) return DType::Q5_0;
  return type;
}

void interleave_group(DType type, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
  if (type == DType::Q8_0_R8) return interleave_typed<BlockQ8_0, BlockQ8_0x8>(src, row_bytes, dst);
  if (type == DType::Q5_0_R8) return interleave_typed<BlockQ5_0, BlockQ5_0x8>(src, row_bytes, dst);
  LOOM_THROW("interleave_group: {} is not an interleaved type", dtype_name(type));
}

void deinterleave_row(DType type, const uint8_t* group, int lane, int64_t b0, int64_t b1,
                      uint8_t* dst) {
  LOOM_CHECK(lane >= 0 && lane < 8, "deinterleave_row: lane {} out of [0, 8)", lane);
  if (type == DType::Q8_0_R8)
    return deinterleave_typed<BlockQ8_0, BlockQ8_0x8>(group, lane, b0, b1, dst);
  if (type == DType::Q5_0_R8)
    return deinterleave_typed<BlockQ5_0, BlockQ5_0x8>(group, lane, b0, b1, dst);
  LOOM_THROW("deinterleave_row: {} is not an interleaved type", dtype_name(type));
}

}  // namespace loom::quant
