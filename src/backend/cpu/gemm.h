// The CPU matmul out[M, N] = x[M, K] . w[N, K]^T for every M: the GEMM for
// M >= kGemmMinRowsQuant (float weights: kGemmMinRowsFloat) and the row path
// (decode) below that, which give each
// output the same bits (see rows_quant).
// Weights are unpacked once per panel (nr weight rows by kc values) into a
// layout the micro-kernels stream from L1/L2, and every activation row passes
// over the same panel. Quantised weights become unsigned bytes u with one f32
// scale s (and for some types one f32 bias b) per sub-block of 16 or 32 values
// along K, so that w = s * (u - offset) + b; activations are 8-bit blocks of 32
// (ActQ8_G). Integer dot products run per sub-block (vpdpbusd with VNNI,
// maddubs + madd without), the offset is taken out exactly in the integer
// accumulator's start value, and scales are applied in f32 once per sub-block.
// Float weights (f32/f16/bf16) are unpacked to f32 panels and multiplied with
// the f32 activations by FMA. Internal to backend/cpu; all functions are pure.
//
// Batch invariance: every output is one chain of f32 operations per K chunk
// that depends only on its activation row and weight row, never on the other
// rows or on how work is split; the row path repeats that chain exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace loom::cpu {

// From this many activation rows on, the GEMM (weight panels unpacked once and
// reused by every row); below, the row path. Quantised weights: the row path
// reads a weight group once and passes over it from L1 for every 4 rows, which
// up to 16 rows beats unpacking panels (a decode step of 8 / 12 / 16 sequences
// of the Qwen2.5-0.5B GGUF: ~480 / 500 / 525 tok/s instead of ~305 / 395 /
// 460 with panels from 8 rows, on 2 AVX-512 cores). With AVX2 (8-row halves,
// 256-bit dots, two groups' products per widening in the GEMM) the panels of
// unsigned layouts win from 5 rows (2 threads, a 0.5B layer's products at 5 /
// 8 / 12 rows: 0.24-0.36 / 0.31-0.45 / 0.41-0.57 ms against 0.29-0.39 /
// 0.42-0.56 / 0.63-0.86 by rows), Q8_0's signed panels somewhere between 8
// and 12 (its output head: rows 15.1 ms at 8 against GEMM 16.2, GEMM 20.7 at
// 12 against rows 23.1), so the switch there is at 10. Float
// weights: the GEMM from 4 rows on (its f16 matvec of 4 rows takes about half
// the row path's time).
constexpr int64_t kGemmMinRowsQuant = 17;
constexpr int64_t kGemmMinRowsQuantAvx2 = 5;
constexpr int64_t kGemmMinRowsQuantAvx2Signed = 10;
constexpr int64_t kGemmMinRowsFloat = 4;
// Activation rows per row-kernel call (rows_quant takes 1-4, rows_float
// 1-3); more rows pass over the same weight group again, from L1.
constexpr int64_t kRowKernelRowsQuant = 4;
constexpr int64_t kRowKernelRows = 3;
// K values per panel chunk: each output's f32 sum restarts at every chunk and
// is added to the previous chunks' total (the row path chunks K alike).
constexpr int64_t kGemmKcQuant = 1024;  // a multiple of 256 (every block size)
constexpr int64_t kGemmKcFloat = 256;

// One activation block of 32 values for the GEMM: x ~= d * qs, |qs| <= 127,
// sum16[h] = sum of qs[16h, 16h + 16).
struct ActQ8_G {
  float d;
  int16_t sum16[2];
  int8_t qs[kQK];
};
static_assert(sizeof(ActQ8_G) == 40);

// How one quantised weight type maps onto a panel: w = s * (u - offset) + b per
// sub-block of `sub` values (b only when has_bias; offset is 0 then).
struct QuantLayout {
  int sub;         // 16 or 32 values per scale
  int offset;      // subtracted from u in the integer domain
  bool has_bias;   // b per sub-block (types with a min: Q4_1, Q5_1, Q4_K, Q5_K)
  bool is_signed;  // u holds the signed q itself (Q8_0 without VNNI), offset 0
};

// A panel of nr weight rows (columns of the output) over kc values of K. Rows
// past the weight's end are zero. q: [kc / 4][nr][4] bytes (4 consecutive K
// values of one row next to each other, as vpdpbusd reads them); scale and
// bias: [kc / sub][nr].
struct QuantPanel {
  QuantLayout layout;
  int nr = 0;
  int64_t kc = 0;
  uint8_t* q = nullptr;
  float* scale = nullptr;
  float* bias = nullptr;
};

// The GEMM kernels of one instruction set. nr is the panel width the kernels
// are built for (a multiple of an interleaved group, 16 rows).
struct GemmKernels {
  Isa isa;
  int nr;
  // Whether `type` has a quantised GEMM path, and its panel layout.
  bool (*quant_layout)(DType type, QuantLayout& layout);
  // k values (a multiple of 32) of one f32 row to k / 32 blocks.
  void (*quantize)(const float* x, ActQ8_G* dst, int64_t k);
  // Unpacks rows [0, rows) (rows <= nr) of the weight at w (row_bytes apart),
  // values [k0, k0 + kc) (k0 and kc whole blocks of the type), into panel,
  // whose buffers hold nr * kc bytes and nr * kc / 16 floats each. For an
  // interleaved type (quant/interleave.h) w is the start of a group of rows
  // (so are the row path's w and next), and the last group may hold rows past
  // `rows`, which are read but never used.
  void (*pack_quant)(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0,
                     int64_t kc, QuantPanel& panel);
  // c[r * ldc + j] (+)= panel row j . x row r for r < m, j < cols (<= nr);
  // x rows are xs blocks apart and start at the panel's k0; accumulate adds to c.
  void (*gemm_quant)(const QuantPanel& panel, const ActQ8_G* x, int64_t xs, int64_t m, float* c,
                     int64_t ldc, int cols, bool accumulate);
  // Float weights: panel [kc][nr] f32 from rows [0, rows) of an f32/f16/bf16
  // weight, values [k0, k0 + kc); zero past rows.
  void (*pack_float)(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0,
                     int64_t kc, float* panel);
  // c[r * ldc + j] (+)= panel column j . x[r * ldx + (0..kc)].
  void (*gemm_float)(const float* panel, int64_t kc, const float* x, int64_t ldx, int64_t m,
                     float* c, int64_t ldc, int cols, bool accumulate);
  // The row path: c[r * ldc + j] = weight row j . x row r for r < m (rows_quant
  // 1..4, rows_float 1..3) and j < rows (<= 8; for an interleaved type <= its
  // row group, one group), straight from the weight as
  // stored (rows row_bytes apart, all k values), every output computed with
  // the same operations in the same order as gemm_quant / gemm_float give it. Null where the GEMM
  // serves every M (portable). Unless next (the rows after w's) is null, rows_quant prefetches
  // ahead as it goes: the next rows, or for an interleaved weight its one stream of bytes
  // row_prefetch() ahead.
  void (*rows_quant)(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k,
                     const ActQ8_G* x, int64_t xs, int m, float* c, int64_t ldc,
                     const uint8_t* next);
  void (*rows_float)(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k,
                     const float* x, int64_t ldx, int m, float* c, int64_t ldc);
};

// How far ahead of its reads the row path prefetches an interleaved weight's
// stream of bytes, and into which cache: about what DRAM latency times one
// core's share of the bandwidth needs in flight. Chosen once per process by
// CPU vendor, measured on 2-core VMs: AMD (and others) 6 KB into L1 (4-8 KB
// best on an EPYC; a whole next group, 64 KB for a Q6_K row of 4,864 values,
// overran L1); Intel 24 KB into L2 (prefetcht1: a Xeon's core keeps more
// misses in flight through its L2 than its L1 allows; single-stream decode
// of the default GGUF +7% there, bench/results/cpu_row_prefetch_xeon.json).
// LOOM_CPU_ROW_PREFETCH=BYTES or BYTES,l1 / BYTES,l2 overrides it (BYTES in
// [0, 1 MiB]; a malformed value throws when a CPU backend is made).
struct RowPrefetch {
  int64_t bytes = 6144;
  bool l2 = false;
};
const RowPrefetch& row_prefetch();
// The parse of LOOM_CPU_ROW_PREFETCH's value over `base` (exposed for tests).
RowPrefetch parse_row_prefetch(const char* value, RowPrefetch base);

const GemmKernels& gemm_kernels_portable();
const GemmKernels& gemm_kernels_avx2();
const GemmKernels& gemm_kernels_avx512();
const GemmKernels& gemm_kernels_avx512vnni();
const GemmKernels& gemm_kernels_for(Isa isa);

// Whether gemm_matmul takes weights of this type under the active ISA.
bool gemm_supports(DType w);
// out[M, N] = x[M, K] . w[N, K]^T (+ bias[N]): through the panels from
// kGemmMinRowsQuant / kGemmMinRowsFloat rows on, the row path below (where the
// ISA has one); shapes are checked
// by the caller (matmul), bias may be null. Runs on pool.
void gemm_matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const float* bias,
                 Tensor& out);

// Several weights of the same K against one x (q, k, v; gate, up): where every
// weight takes the row path at x's rows, x is quantised once and
// every weight's column tiles run in one parallel pass; otherwise
// gemm_matmul for each. Each output gets exactly gemm_matmul's bits.
struct GemmJob {
  const Tensor* w;
  const float* bias;  // or null
  Tensor* out;
};
void gemm_matmul_many(ThreadPool& pool, const Tensor& x, const std::vector<GemmJob>& jobs);

}  // namespace loom::cpu
