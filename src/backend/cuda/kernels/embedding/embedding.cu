// Row gathers: the token embedding lookup (bf16 table rows times a scale) and
// gather_rows (plain copies of rows of any type). One block per output row.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

__global__ void embedding_kernel(const bf16* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                                 float scale, bf16* out_all, bool vec) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  bf16* out = out_all + t * hidden;
  const bool valid = id >= 0 && id < vocab;
  const bf16* row = table + (valid ? static_cast<int64_t>(id) : 0) * hidden;
  const int64_t n8 = vec ? hidden / 8 : 0;
  for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
    float v[8];
    bf16x8_to_float(reinterpret_cast<const uint4*>(row)[i], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = valid ? v[j] * scale : 0.0f;
    reinterpret_cast<uint4*>(out)[i] = float_to_bf16x8(v);
  }
  for (int64_t i = n8 * 8 + threadIdx.x; i < hidden; i += blockDim.x)
    out[i] = __float2bfloat16(valid ? __bfloat162float(row[i]) * scale : 0.0f);
}

template <class V>
__global__ void gather_rows_kernel(const V* src, const int32_t* rows, int64_t row_elems, V* dst) {
  const int64_t i = blockIdx.x;
  const V* s = src + static_cast<int64_t>(rows[i]) * row_elems;
  V* d = dst + i * row_elems;
  for (int64_t j = threadIdx.x; j < row_elems; j += blockDim.x) d[j] = s[j];
}

__global__ void resolve_token_ids_kernel(int32_t* ids, int64_t n, const int32_t* src) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && ids[i] < 0) ids[i] = src[-static_cast<int64_t>(ids[i]) - 1];
}

}  // namespace

void resolve_token_ids(int32_t* ids, int64_t n, const int32_t* src, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  resolve_token_ids_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(ids, n,
                                                                                                       src);
}

void embedding_bf16(const void* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                    float scale, void* out, cudaStream_t stream) {
  if (n <= 0 || hidden <= 0) return;
  const bool vec = hidden % 8 == 0 && aligned16(table) && aligned16(out);
  const int64_t items = vec ? hidden / 8 : hidden;
  const int threads = items >= 256 ? 256 : (items >= 128 ? 128 : 64);
  embedding_kernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(
      static_cast<const bf16*>(table), vocab, hidden, ids, scale, static_cast<bf16*>(out), vec);
}

void gather_rows(const void* src, const int32_t* rows, int64_t n, int64_t row_bytes, void* dst,
                 cudaStream_t stream) {
  if (n <= 0 || row_bytes <= 0) return;
  const auto grid = static_cast<unsigned>(n);
  if (row_bytes % 16 == 0 && aligned16(src) && aligned16(dst))
    gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint4*>(src), rows, row_bytes / 16,
                                                 static_cast<uint4*>(dst));
  else if (row_bytes % 4 == 0 && (reinterpret_cast<uintptr_t>(src) & 3u) == 0 &&
           (reinterpret_cast<uintptr_t>(dst) & 3u) == 0)
    gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint32_t*>(src), rows, row_bytes / 4,
                                                 static_cast<uint32_t*>(dst));
  else
    gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint8_t*>(src), rows, row_bytes,
                                                 static_cast<uint8_t*>(dst));
}

}  // namespace loom::cuda
