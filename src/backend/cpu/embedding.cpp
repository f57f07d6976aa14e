// embedding (rows of a table of any supported dtype, interleaved ones too, to
// f32, times a scale) and gather_rows (plain row copies).
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/quant/interleave.h"
#include "backend/quant/quant.h"
#include "core/error.h"

namespace loom::cpu {

void embedding(ThreadPool& pool, const Tensor& table, const Tensor& ids, float scale, Tensor& out) {
  LOOM_CHECK(table.ndim() == 2, "embedding table must be 2-D, got {}", shape_str(table.shape()));
  LOOM_CHECK(ids.dtype() == DType::I32 && ids.ndim() == 1, "embedding ids must be i32 [T]");
  const int64_t vocab = table.dim(0), hidden = table.dim(1), t = ids.dim(0);
  LOOM_CHECK(out.dtype() == DType::F32 && out.rows() == t && out.cols() == hidden,
             "embedding out {} must be f32 [{}, {}]", shape_str(out.shape()), t, hidden);
  const int32_t* id = ids.data_as<const int32_t>();
  for (int64_t i = 0; i < t; ++i)
    LOOM_CHECK(id[i] >= 0 && id[i] < vocab, "token id {} out of range [0, {})", id[i], vocab);
  const auto* base = static_cast<const uint8_t*>(table.data());
  const int64_t stride = table.row_stride_bytes();
  float* o = out.data_as<float>();
  const DType type = table.dtype(), plain = quant::plain_type(type);
  const bool interleaved = plain != type;
  parallel_rows(pool, t, hidden, [&](int64_t b, int64_t e) {
    std::vector<uint8_t> plain_row(interleaved ? static_cast<size_t>(stride) : 0);
    for (int64_t i = b; i < e; ++i) {
      float* row = o + i * hidden;
      const uint8_t* src = base + id[i] * stride;
      if (interleaved) {  // the row's lane of its group, as the plain row
        const int64_t lane = id[i] % quant::kInterleaveRows;
        quant::deinterleave_row(type, src - lane * stride, static_cast<int>(lane), 0,
                                hidden / dtype_info(type).block_elems, plain_row.data());
        src = plain_row.data();
      }
      quant::dequantize_row(plain, src, row, hidden);
      if (scale != 1.0f)
        for (int64_t j = 0; j < hidden; ++j) row[j] *= scale;
    }
  });
}

void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) {
  const int64_t n = static_cast<int64_t>(rows.size());
  LOOM_CHECK(out.dtype() == x.dtype() && out.rows() == n && out.cols() == x.cols(),
             "gather_rows out {} must be [{}, {}] of {}", shape_str(out.shape()), n, x.cols(),
             dtype_name(x.dtype()));
  const int64_t stride = x.row_stride_bytes(), src_rows = x.rows();
  const auto* src = static_cast<const uint8_t*>(x.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  LOOM_CHECK(src != dst || n == 0, "gather_rows cannot run in place");
  for (int64_t i = 0; i < n; ++i) {
    LOOM_CHECK(rows[i] >= 0 && rows[i] < src_rows, "gather row {} out of range [0, {})", rows[i],
               src_rows);
    std::memcpy(dst + i * stride, src + rows[i] * stride, static_cast<size_t>(stride));
  }
}

}  // namespace loom::cpu
