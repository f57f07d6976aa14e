// Backend: the op interface the model code is written against. One
// implementation per device (cpu/, cuda/); each is tested against the CPU fp32
// reference (tests/backend). Tensors passed in live on the backend's device.
// Activations are f32 on CPU (bf16 on CUDA); weights may be any DType the
// backend accepts (CPU: f32, f16, bf16 and GGUF quantised blocks).
// Ops are called from one thread (the engine thread) and may use the
// backend's own worker threads internally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

enum class GatedActivation { Silu, GeluTanh };

// Where each token of a step sits in the paged KV cache, and which sequences
// the step's tokens belong to. Host-side arrays; backends copy what they need.
// Tokens of one sequence are contiguous in the step and in position order.
struct AttentionMetadata {
  int32_t num_seqs = 0;
  std::vector<int32_t> query_start;   // [num_seqs + 1]: token offsets of each sequence in the step
  std::vector<int32_t> context_lens;  // [num_seqs]: tokens in the cache after this step (incl. new)
  std::vector<int32_t> block_tables;  // [num_seqs * max_blocks_per_seq] physical block ids
  int32_t max_blocks_per_seq = 0;
  std::vector<int64_t> slot_mapping;  // [num_tokens]: block * block_size + offset for each new token
};

// Throws loom::Error unless meta describes num_tokens tokens whose sequences'
// blocks all lie in [0, num_blocks) (for a cache of block_size slots per block).
// Every backend calls it before reading the cache through the block tables.
void check_attention_metadata(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                              int64_t num_blocks);

// One layer's paged cache: K and V each [num_blocks, block_size, num_kv_heads, head_dim].
struct KvLayerCache {
  Tensor k;
  Tensor v;
};

struct AttentionParams {
  float scale = 1.0f;        // softmax scale (usually 1/sqrt(head_dim))
  int32_t sliding_window = 0;  // >0: a query at position p sees keys in (p - window, p]
  float logit_softcap = 0.0f;  // >0: logits = cap * tanh(logits / cap)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // dtype of activations and of the logits forward() returns on this device.
  virtual DType activation_dtype() const { return DType::F32; }

  // --- memory ---
  virtual Tensor alloc(DType dtype, std::vector<int64_t> shape) = 0;  // zero-initialised
  // A weight as this backend wants it (CPU: the same memory, possibly mmapped;
  // CUDA: uploaded, quantised types dequantised to bf16).
  virtual Tensor prepare_weight(const Tensor& host_weight) = 0;
  virtual void copy_from_host(Tensor& dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src, size_t bytes) = 0;
  virtual void synchronize() {}

  // --- ops (outputs are preallocated by the caller; shapes are checked) ---
  // out[T, H] = table[ids[t], :] * scale. ids: i32 [T] on this device.
  virtual void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) = 0;
  // out[M, N] = x[M, K] . w[N, K]^T (+ bias[N], f32). x and out are activations.
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // out = x / rms(x) * (w + weight_offset), per row of x's last dimension.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset,
                        Tensor& out) = 0;
  // residual += x; out = rms_norm(residual) (the pre-norm of the next block).
  virtual void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                            float weight_offset, Tensor& out) = 0;
  // a += b (same shape).
  virtual void add(Tensor& a, const Tensor& b) = 0;
  // Rotary embedding in place on x [T, heads, head_dim] for the first rotary_dim
  // dims: positions i32 [T]; inv_freq f32 [rotary_dim / 2]; cos/sin scaled by mscale.
  virtual void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim,
                    bool interleaved, float mscale) = 0;
  // out[T, I] = act(gate[T, I]) * up[T, I].
  virtual void gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act,
                                Tensor& out) = 0;
  // Writes k, v [T, kv_heads, head_dim] to the cache at meta.slot_mapping.
  virtual void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache,
                        const AttentionMetadata& meta) = 0;
  // Causal attention of q [T, heads, head_dim] over each sequence's cached K/V
  // (after write_kv), with GQA (heads a multiple of kv_heads). out [T, heads, head_dim].
  virtual void paged_attention(const Tensor& q, const KvLayerCache& cache,
                               const AttentionMetadata& meta, const AttentionParams& params,
                               Tensor& out) = 0;
  // out[i, :] = x[rows[i], :]; rows: host indices.
  virtual void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) = 0;
  // x = cap * tanh(x / cap), elementwise.
  virtual void softcap(Tensor& x, float cap) = 0;

  // --- sampling ---
  // out[r] = the index of the largest value in row r of logits [rows, vocab]
  // (f32, bf16 or f16), the lowest index among equal maxima; NaNs are skipped
  // and a row of only NaNs gives 0. Exactly the token Sampler picks at
  // temperature 0 with nothing else set. Waits for the result like
  // copy_to_host. The default copies the logits to the host
  // (backend/argmax_rows.cpp); device backends reduce in place and copy back
  // only the ids.
  virtual void argmax_rows(const Tensor& logits, std::vector<int32_t>& out);
};

// The CPU backend (backend/cpu), using `num_threads` threads (0: all cores).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace loom

namespace loom {

// Copies an f32, bf16 or f16 tensor of any device to host floats (resizing
// `out` to its numel), converting as needed. Synchronises like copy_to_host.
void copy_to_host_f32(Backend& backend, const Tensor& src, std::vector<float>& out);

}  // namespace loom
