// Backend::apply_token_bitmask's default: the rows edited in place when the
// logits are host f32 (the CPU backend), else through a host copy of the
// logits, written back.
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace loom {
namespace {

template <typename T>
void mask_rows(T* values, int64_t vocab, const std::vector<int32_t>& rows, const std::vector<uint32_t>& words,
               T neg_inf) {
  const auto w = static_cast<size_t>((vocab + 31) / 32);
  for (size_t i = 0; i < rows.size(); ++i) {
    T* row = values + int64_t(rows[i]) * vocab;
    const uint32_t* bits = words.data() + i * w;
    for (int64_t t = 0; t < vocab; ++t)
      if (!(bits[t >> 5] >> (t & 31) & 1u)) row[t] = neg_inf;
  }
}

}  // namespace

void Backend::apply_token_bitmask(Tensor& logits, const std::vector<int32_t>& rows,
                                  const std::vector<uint32_t>& words) {
  LOOM_CHECK(logits.ndim() == 2 && logits.cols() > 0, "apply_token_bitmask: logits {} must be [rows, vocab]",
             shape_str(logits.shape()));
  const int64_t n = logits.rows(), vocab = logits.cols();
  const auto w = static_cast<size_t>((vocab + 31) / 32);
  LOOM_CHECK(words.size() == rows.size() * w, "apply_token_bitmask: {} mask words for {} rows of {} tokens",
             words.size(), rows.size(), vocab);
  for (int32_t r : rows) LOOM_CHECK(r >= 0 && r < n, "apply_token_bitmask: row {} outside [0, {})", r, n);
  if (rows.empty()) return;
  const DType dt = logits.dtype();
  LOOM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16,
             "apply_token_bitmask: logits must be f32, bf16 or f16, got {}", dtype_name(dt));
  const bool in_place = logits.device() == Device::Cpu;
  std::vector<uint8_t> staging;
  void* values = logits.data();
  if (in_place) {
    synchronize();
  } else {
    staging.resize(static_cast<size_t>(logits.nbytes()));
    copy_to_host(staging.data(), logits, staging.size());
    values = staging.data();
  }
  if (dt == DType::F32)
    mask_rows(static_cast<float*>(values), vocab, rows, words, -__builtin_inff());
  else  // the 16-bit types' -inf bit patterns
    mask_rows(static_cast<uint16_t*>(values), vocab, rows, words, dt == DType::BF16 ? uint16_t{0xFF80} : uint16_t{0xFC00});
  if (!in_place) copy_from_host(logits, staging.data(), staging.size());
}

}  // namespace loom
