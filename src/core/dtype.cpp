#include "core/dtype.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace loom {

const DTypeInfo& dtype_info(DType t) {
  static const DTypeInfo kInfo[] = {
      {"f32", 1, 4, false},     {"f16", 1, 2, false},     {"bf16", 1, 2, false},
      {"i8", 1, 1, false},      {"i32", 1, 4, false},     {"i64", 1, 8, false},
      {"q8_0", 32, 34, true},   {"q4_0", 32, 18, true},   {"q4_K", 256, 144, true},
      {"q5_K", 256, 176, true}, {"q6_K", 256, 210, true},   {"q4_1", 32, 20, true},
      {"q5_0", 32, 22, true},   {"q5_1", 32, 24, true},     {"f8_e4m3", 1, 1, false},
      {"q8_0_r16", 32, 34, true, 16},   {"q5_0_r16", 32, 22, true, 16},
      {"q4_K_r16", 256, 144, true, 16}, {"q5_K_r16", 256, 176, true, 16},
      {"q6_K_r16", 256, 210, true, 16},
  };
  const auto i = static_cast<size_t>(t);
  LOOM_CHECK(i < std::size(kInfo), "unknown dtype {}", i);
  return kInfo[i];
}

int64_t row_bytes(DType t, int64_t elems) {
  const DTypeInfo& info = dtype_info(t);
  if (elems < 0 || elems % info.block_elems != 0)
    LOOM_THROW("{} values do not fill whole {} blocks of {}", elems, info.name, info.block_elems);
  return checked_mul(elems / info.block_elems, info.block_bytes);
}

}  // namespace loom
