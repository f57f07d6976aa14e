// The CPU implementations of the Backend ops, called by CpuBackend after it has
// picked the thread pool. Each checks its shapes and dtypes (LOOM_CHECK) and
// runs on the calling thread plus `pool`'s workers. Internal to backend/cpu.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace loom::cpu {

void embedding(ThreadPool& pool, const Tensor& table, const Tensor& ids, float scale, Tensor& out);
void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Several products of one x (Backend::linear_many with plain weights), each
// exactly what matmul gives (decode: x quantised once, every weight's rows in
// one parallel pass).
void matmul_many(ThreadPool& pool, const Tensor& x, const std::vector<Backend::LinearJob>& jobs);
void rms_norm(ThreadPool& pool, const Tensor& x, const Tensor& w, float eps, float weight_offset,
              Tensor& out);
void add_rms_norm(ThreadPool& pool, const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                  float weight_offset, Tensor& out);
void add(ThreadPool& pool, Tensor& a, const Tensor& b);
void rope(ThreadPool& pool, Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          int rotary_dim, bool interleaved, float mscale);
void gated_activation(ThreadPool& pool, const Tensor& gate, const Tensor& up, GatedActivation act,
                      Tensor& out);
void write_kv(ThreadPool& pool, const Tensor& k, const Tensor& v, KvLayerCache& cache,
              const AttentionMetadata& meta);
void paged_attention(ThreadPool& pool, const Tensor& q, const KvLayerCache& cache,
                     const AttentionMetadata& meta, const AttentionParams& params, Tensor& out);
void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out);
void softcap(ThreadPool& pool, Tensor& x, float cap);
// A weight as the CPU runs it: Q8_0 / Q5_0 matrices whose rows are a multiple
// of 8 become a copy in their interleaved type (quant/interleave.h: decode
// reads them several times faster; every op takes both layouts and gives the
// same bits), anything else is returned as it is. LOOM_CPU_INTERLEAVE=0 keeps
// every weight as stored (for A/B runs).
Tensor interleave_weight(ThreadPool& pool, const Tensor& w);
bool interleave_enabled();

}  // namespace loom::cpu

namespace loom::cpu {

// Runs fn(begin, end) over rows in parallel, with at least ~32K elements per
// chunk so small ops (decode steps) stay on the calling thread.
template <class Fn>
void parallel_rows(ThreadPool& pool, int64_t rows, int64_t cols, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, cols));
  pool.parallel_for(rows, fn, grain);
}

}  // namespace loom::cpu
