// Launchers of the CUDA backend's kernels, callable from host C++. Plain device
// pointers, sizes in elements, every launch asynchronous on `stream`. Callers
// (cuda_backend_*.cpp) check shapes, dtypes and bounds first; these check nothing
// and report launch errors only through cudaGetLastError.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom::cuda {

// cudaSuccess when this build has code the current device can run, else the
// lookup's error (e.g. cudaErrorNoKernelImageForDevice).
cudaError_t probe_kernel_image();

// Whether GEMV kernels are launched with programmatic dependent launch
// (kernels/launch.cuh): off by default; the backend turns it on for sm_90 and
// later unless LOOM_PDL=0. Process-wide.
void set_programmatic_launch(bool on);
bool programmatic_launch();

// dst[i] = src[i] converted; src F32, F16 or BF16; dst F32 or BF16.
void convert(DType src_type, const void* src, DType dst_type, void* dst, int64_t n, cudaStream_t stream);

// out[r, c] += bias[c] for bf16 out [rows, cols] and bf16 bias [cols].
void add_bias_rows(void* out, const void* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// Small-M GEMM as a GEMV (gemv.cu): out[m, n] = x[m, :] . w[n, :] (+ bias[n]),
// bf16 x [m, k], w [n, k], bias [n] or null, out [m, n]; fp32 accumulation in
// an order that depends on k only (a row's result does not depend on m).
// gemv_supported: 1 <= m <= kGemvMaxRows, k a multiple of 8, x and w 16-byte
// aligned.
constexpr int64_t kGemvMaxRows = 2;  // past 2 rows cuBLASLt is as fast (bench_cuda_ops)
bool gemv_supported(int64_t m, int64_t k, const void* x, const void* w);
void gemv_bf16(const void* x, const void* w, const void* bias, void* out, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream);

// a += b, bf16, n values.
void add_bf16(void* a, const void* b, int64_t n, cudaStream_t stream);

// out = act(gate) * up, bf16, n values; act is GELU (tanh) when gelu, else SiLU.
void gated_activation_bf16(const void* gate, const void* up, void* out, int64_t n, bool gelu,
                           cudaStream_t stream);

// x = cap * tanh(x / cap), bf16, n values.
void softcap_bf16(void* x, int64_t n, float cap, cudaStream_t stream);

// A kernel's bf16 output rows [rows, h] also written quantised to FP8 E4M3
// for the FP8 linear layer that reads them next, exactly as
// quantize_fp8_rows quantises them (fp8_kernels.h): q [rows, h], scale
// [rows]; static_scale null: Token mode (each row's amax), else Static.
struct Fp8RowsOut {
  uint8_t* q = nullptr;
  float* scale = nullptr;
  const float* static_scale = nullptr;
};

// out = rms_norm(x) * (w + offset) per row of h values, bf16 x/out; w is F32 or
// BF16 [h]. With residual: residual += x (rounded to bf16) and the norm is of
// the new residual. With fp8: out quantised too; that needs h a multiple of 16
// and x, out, residual and fp8->q 16-byte aligned, else nothing is launched
// and the result is false.
bool rms_norm_bf16(const void* x, void* residual, const void* w, DType w_type, float offset, float eps,
                   void* out, int64_t rows, int64_t h, cudaStream_t stream,
                   const Fp8RowsOut* fp8 = nullptr);

// out[t, :] = table[ids[t], :] * scale (bf16 table [vocab, hidden]); ids out of
// range give zero rows.
void embedding_bf16(const void* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n,
                    float scale, void* out, cudaStream_t stream);

// dst row i = src row rows[i], rows of row_bytes bytes (indices checked by the caller).
void gather_rows(const void* src, const int32_t* rows, int64_t n, int64_t row_bytes, void* dst,
                 cudaStream_t stream);

// In-place rotary embedding of bf16 x [tokens, heads, head_dim] (first
// rotary_dim dims; inv_freq f32 [rotary_dim / 2]).
void rope_bf16(void* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions,
               const float* inv_freq, int rotary_dim, bool interleaved, float mscale, cudaStream_t stream);

// Copies token t's k and v rows (row_elems bf16 each) to cache slot slots[t];
// negative slots are skipped.
void write_kv_bf16(const void* k, const void* v, const int64_t* slots, int64_t tokens, int64_t row_elems,
                   void* k_cache, void* v_cache, cudaStream_t stream);
// The same into an FP8 E4M3 cache: value x of KV head h is stored as
// fp8(x * (1 / scale[h])) (k_scale for K, v_scale for V); head_dim a
// multiple of 8, rows 16-byte aligned.
void write_kv_fp8(const void* k, const void* v, const int64_t* slots, int64_t tokens,
                  int64_t row_elems, int64_t head_dim, const float* k_scale, const float* v_scale,
                  void* k_cache, void* v_cache, cudaStream_t stream);

// split_qkv_bf16: token t's fused row [q heads | k heads | v heads] (head_dim
// each) goes to q [t, heads, head_dim] and, when slots is null, to k/v [t,
// kv_heads, head_dim], else to the caches at slot slots[t] (negative: skipped);
// with rotary_dim > 0, q and k are rotated as rope_bf16 does.
// An FP8 E4M3 cache takes k_cache8/v_cache8 (and its per-head scales)
// instead of k_cache/v_cache; the rotated k is rounded to bf16 before it is
// quantised, as write_kv_fp8 quantises the unfused path's bf16 k.
struct SplitQkvArgs {
  int heads = 0, kv_heads = 0, head_dim = 0;
  __nv_bfloat16* q = nullptr;
  __nv_bfloat16* k = nullptr;
  __nv_bfloat16* v = nullptr;
  const int64_t* slots = nullptr;
  __nv_bfloat16* k_cache = nullptr;
  __nv_bfloat16* v_cache = nullptr;
  uint8_t* k_cache8 = nullptr;  // FP8 E4M3 caches
  uint8_t* v_cache8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int rotary_dim = 0;  // 0: no rotation
  bool interleaved = false;
  float mscale = 1.0f;
};
void split_qkv_bf16(const void* qkv, int64_t tokens, const SplitQkvArgs& args, cudaStream_t stream);

// out[r, c] = act(gate_up[r, c]) * gate_up[r, inter + c], bf16; act GELU
// (tanh) when gelu, else SiLU. With fp8: out quantised too (one CUDA block per
// row); that needs inter a multiple of 16 and gate_up, out and fp8->q 16-byte
// aligned, else nothing is launched and the result is false.
bool gated_activation_fused_bf16(const void* gate_up, void* out, int64_t rows, int64_t inter, bool gelu,
                                 cudaStream_t stream, const Fp8RowsOut* fp8 = nullptr);

// out[r] = index of the largest value of row r of logits [rows, vocab] (F32,
// F16 or BF16), lowest index on ties, NaNs skipped (only NaNs: 0). out is a
// device array of rows int32.
void argmax_rows(DType type, const void* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// logits[rows[i], t] = -inf where bit t % 32 of words[i * W + t / 32] is
// clear, W = ceil(vocab / 32); logits F32, F16 or BF16 rows of
// row_stride_bytes; rows and words are device arrays (num_rows rows).
void apply_token_bitmask(DType type, void* logits, int64_t row_stride_bytes, int64_t vocab, const int32_t* rows,
                         int32_t num_rows, const uint32_t* words, cudaStream_t stream);

// One draw of sample_rows as the kernel reads it (cuda_backend_sampling.cpp derives it
// from a SampleSpec). Fixed-point masses: round(exp(x - max) * 2^32).
struct SampleRowSpec {
  uint64_t uniform64 = 0;     // floor(uniform * 2^64): the draw's target is uniform64 * total >> 64
  uint64_t top_p64 = 0;       // floor(top_p * 2^64) when top_p_on
  int32_t row = 0;            // logits row
  float inv_temperature = 1;  // 1.0f / temperature (x * inv_temperature, as the host Sampler)
  int32_t top_k = 0;          // <= 0: off
  int32_t top_p_on = 0;       // top_p < 1
  float log_min_p = 0;        // logf(min_p) when min_p_on: the cut is max + log_min_p
  int32_t min_p_on = 0;       // min_p > 0
  int32_t edits_begin = 0;    // edits[edits_begin, edits_end), distinct tokens in [0, vocab)
  int32_t edits_end = 0;
  int32_t values_begin = 0;  // this spec's edit_values[values_begin, + edits_end - edits_begin)
  int32_t out = 0;           // the draw goes to out[this]
};

// One LogitEdit (rep, then - sub, then + add, then ban -> -inf).
struct SampleRowEdit {
  int32_t token = 0;
  float rep = 1;
  float sub = 0;
  float add = 0;
  int32_t ban = 0;
};

// Words of the per-spec edit bitmaps sample_rows needs: ceil(vocab / 32) per spec.
inline int64_t sample_rows_bitmap_words(int64_t vocab) {
  return (vocab + 31) / 32;
}

// out[specs[i].out] = the token drawn for specs[i] from its row of logits [rows, vocab]
// (F32, F16 or BF16), by Backend::sample_rows's contract. specs and edits are
// device arrays; edit_bitmap (num_specs * sample_rows_bitmap_words(vocab)
// words, all zero on entry when there are edits), edit_prefix (as many words)
// and edit_values (each spec's range at its values_begin) are scratch.
// vocab <= 2^19.
void sample_rows(DType type, const void* logits, int64_t vocab, const SampleRowSpec* specs,
                 int32_t num_specs, const SampleRowEdit* edits, uint32_t* edit_bitmap,
                 uint32_t* edit_prefix, float* edit_values, int32_t* out, cudaStream_t stream);

// ids[i] = src[-ids[i] - 1] where ids[i] < 0 (indices checked by the caller
// against the rows src holds), n int32 ids.
void resolve_token_ids(int32_t* ids, int64_t n, const int32_t* src, cudaStream_t stream);

// Paged attention over a bf16 or FP8 E4M3 cache [blocks, block_size, kv_heads, head_dim].
// The metadata pointers are device copies of AttentionMetadata plus token_seq
// (the sequence of each token). Keys are split in partitions of
// partition_keys; a token whose keys span several partitions has their
// results go to partial_acc/partial_ml, and the last of its blocks to finish
// merges them into out (no second kernel). With
// token_index set, the kernels cover only the num_tokens tokens it lists
// (the others' rows of out are left alone) and the partials are indexed by
// position in that list.
// What both paged attention kernels read: q/out, the bf16 caches [blocks,
// block_size, kv_heads, head_dim], the step's metadata (device copies of
// AttentionMetadata) and the layer's attention parameters.
struct PagedKvArgs {
  const void* q = nullptr;  // bf16 [tokens, heads, head_dim]
  void* out = nullptr;      // bf16 [tokens, heads, head_dim]
  const void* k_cache = nullptr;  // bf16, or FP8 E4M3 when k_scale is set
  const void* v_cache = nullptr;
  const float* k_scale = nullptr;  // FP8 caches: dequantising scale per KV head
  const float* v_scale = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t max_blocks_per_seq = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t block_shift = -1;  // log2(block_size) when a power of two, else -1
  float scale = 1.0f;
  float softcap = 0.0f;
  int32_t sliding_window = 0;
};

constexpr int kMaxAttnPartitions = 128;

struct PagedAttentionArgs : PagedKvArgs {
  const int32_t* token_seq = nullptr;
  const int32_t* token_index = nullptr;  // [num_tokens] token ids; nullptr: tokens 0 .. num_tokens - 1
  int32_t num_tokens = 0;
  int32_t heads_per_block = 0;  // G: 1, 2, 4 or 8 query heads of one kv head per CUDA block
  int32_t head_chunks = 0;      // ceil(group / G)
  // The grid's x is the kv head chunk and y the token (at most 65535 tokens),
  // not the other way round: blocks launched together then read neighbouring
  // head slices of the same cache slots.
  bool heads_first = false;
  // bf16 caches at head sizes 64, 128 and 256: the tensor-core kernel (else
  // the CUDA-core one, as for other sizes). The host's choice.
  bool bf16_mma = false;
  int32_t l2_prefetch = 0;  // 0, 128 or 256: the L2 prefetch hint of the cache reads
  int32_t partition_keys = 0;
  int32_t num_partitions = 1;  // at most kMaxAttnPartitions
  // With num_partitions > 1: the partitions' partials and one arrival counter
  // per (token, kv head, head chunk), all 0 before the first launch (the
  // kernel leaves them 0).
  float* partial_acc = nullptr;  // [num_tokens, heads, num_partitions, head_dim]
  float* partial_ml = nullptr;   // [num_tokens, heads, num_partitions, 2]: max (log2 units), sum
  int32_t* partition_counters = nullptr;  // [num_tokens, num_kv_heads * head_chunks]
};

// Head sizes that are a multiple of 8 in [8, 256] (16, 32, 48, 64, 80, 96,
// 112, 128, 160, 192 and 256 have their own kernels; the others share a
// runtime-sized one). Returns false (launching nothing) for others.
bool paged_attention_supports_head_dim(int64_t head_dim);
bool paged_attention_bf16(const PagedAttentionArgs& args, cudaStream_t stream);
// Blocks of the paged attention kernel for (head_dim, cache type, heads per
// block, bf16_mma as in PagedAttentionArgs) that one SM of the current device
// runs at once (0: unknown).
int paged_attention_blocks_per_sm(int64_t head_dim, bool fp8_kv, int heads_per_block,
                                  bool bf16_mma);

// FlashAttention-2-style paged attention for the new tokens of prefill
// sequences (more than one new token), on tensor cores. Same semantics as
// paged_attention_bf16. A sequence's query rows are its new tokens times the
// kv head's group of query heads, token-major (row r: token r / group, head
// kv_head * group + r % group); a CUDA block serves kFlashBlockM consecutive
// rows of one sequence and one kv head, so every K/V tile it loads serves the
// whole group. tiles lists the blocks' (sequence, first row) pairs
// (StepMetadataCache builds it); the grid is num_tiles * num_kv_heads blocks.
constexpr int kFlashBlockM = 64;

struct FlashPrefillArgs : PagedKvArgs {  // out: only the tiles' rows are written
  const int32_t* tiles = nullptr;  // [num_tiles][2]: sequence, first row (a multiple of kFlashBlockM)
  int32_t num_tiles = 0;
};

// Head sizes with a flash kernel: 64, 128 and 256. Returns false (launching
// nothing) for others.
bool flash_prefill_supports_head_dim(int64_t head_dim);
bool flash_prefill_bf16(const FlashPrefillArgs& args, cudaStream_t stream);

}  // namespace loom::cuda
