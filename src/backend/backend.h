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
#include <optional>
#include <string>
#include <vector>

#include "backend/linear.h"
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
                                      // (negative: padding, not written)
  // > 0: kernels size their work for contexts up to this many keys instead of
  // this step's longest context, so the launch shapes depend only on the
  // bound (a recorded step replayed with other contexts). Every context must
  // be <= it.
  int32_t max_context_bound = 0;
};

// Throws loom::Error unless meta describes num_tokens tokens whose sequences'
// blocks all lie in [0, num_blocks) (for a cache of block_size slots per block).
// Every backend calls it before reading the cache through the block tables.
void check_attention_metadata(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                              int64_t num_blocks);

// One layer's paged cache: K and V each [num_blocks, block_size, num_kv_heads, head_dim].
// An F8_E4M3 cache also holds each KV head's dequantising scales (f32
// [num_kv_heads] on the cache's device): a cached value is fp8 * scale,
// written as fp8(x * (1 / scale)).
struct KvLayerCache {
  Tensor k;
  Tensor v;
  Tensor k_scale{};
  Tensor v_scale{};
};

struct AttentionParams {
  float scale = 1.0f;        // softmax scale (usually 1/sqrt(head_dim))
  int32_t sliding_window = 0;  // >0: a query at position p sees keys in (p - window, p]
  float logit_softcap = 0.0f;  // >0: logits = cap * tanh(logits / cap)
};

// One token's logit change before sampling (Backend::sample_rows), applied in
// this order: repetition (x > 0 ? x / rep : x * rep; rep 1: none), x -= sub
// (presence + frequency * count), x += add (logit_bias), then ban (x = -inf).
struct LogitEdit {
  int32_t token = 0;  // in [0, vocab); at most one edit per token per spec
  float rep = 1.0f;
  float sub = 0.0f;
  float add = 0.0f;
  bool ban = false;
};

// x after `e`, exactly as every sampler applies it (the host Sampler and the
// backends' sample_rows): one definition of the penalties' arithmetic.
inline float apply_logit_edit(float x, const LogitEdit& e) {
  x = x > 0 ? x / e.rep : x * e.rep;
  x = x - e.sub + e.add;
  return e.ban ? -__builtin_inff() : x;
}

// One draw of Backend::sample_rows.
struct SampleSpec {
  int32_t row = 0;            // logits row (several specs may share one: n > 1)
  float temperature = 1.0f;   // > 0 (greedy rows use argmax_rows)
  int32_t top_k = 0;          // <= 0: off
  float top_p = 1.0f;         // >= 1: off
  float min_p = 0.0f;         // <= 0: off
  double uniform = 0.0;       // the draw, in [0, 1) (the host's Philox / engine generator)
  int32_t edits_begin = 0;    // this spec's edits: edits[edits_begin, edits_end)
  int32_t edits_end = 0;
};

// A step's ops recorded once by a backend (Backend::end_capture) and replayed
// many times with new inputs written to the same device memory.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
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
  // dst = src, same dtype and size, both on this device (e.g. KV blocks).
  virtual void copy(Tensor& dst, const Tensor& src);
  // Free and total bytes of the device memory alloc() draws from, as the
  // device reports them now (other processes' use included); nullopt for a
  // backend on host memory (CPU), which has no device budget. Throws
  // loom::Error when the device cannot be asked.
  struct DeviceMemory {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
  };
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }

  // --- step preparation and recorded steps ---
  // Called once per forward step before any op that reads `meta`: device
  // backends upload it (and check it against a cache of num_blocks blocks of
  // block_size slots) here, so later ops of the step given the same `meta`
  // object reuse that upload.
  virtual void prepare_attention(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                                 int64_t num_blocks) {
    (void)meta, (void)num_tokens, (void)block_size, (void)num_blocks;
  }
  // Whether begin_capture/end_capture/replay work (CUDA graphs).
  virtual bool supports_capture() const { return false; }
  // Ops queued between begin_capture() and end_capture() are recorded, not
  // run. They must not copy from the host, allocate or wait: inputs are
  // written (copy_from_host, prepare_attention) before replay() instead.
  // abort_capture() ends a capture that failed, discarding it.
  virtual void begin_capture();
  virtual std::unique_ptr<StepGraph> end_capture();
  virtual void abort_capture() {}
  // Runs a recorded step. False, running nothing, when device memory the
  // recording used has since been reallocated: record it again.
  virtual bool replay(StepGraph& graph);

  // --- linear layers (backend/linear.h) ---
  // A linear layer's weight as this backend runs it. Plain weights go
  // through prepare_weight. The default runs FP8 weights dequantised: the
  // weight becomes dequantize_fp8_linear's f32 matrix, prepared like any f32
  // matrix (activations are then not quantised), and `quantize` throws:
  // quantising at load is for backends with FP8 kernels.
  virtual LinearWeight prepare_linear(const LinearWeight& host);
  // out[M, N] = x[M, K] . w^T (+ bias[N]). Plain weights: matmul. FP8 ones:
  // x is quantised as w.activation says and the FP8 products accumulate in
  // f32 (out = sum_k xq * wq * x_scale * w_scale). The default handles plain
  // weights only.
  virtual void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out);
  // Several linear layers of one input (q, k and v; gate and up, where their
  // weights do not stack into one matrix): outs[i] = linear(x, ws[i],
  // biases[i]). The default runs linear for each; a backend may share the
  // work (the CPU quantises x once and runs every weight's rows in one
  // parallel pass when x has few rows). Each output is what linear gives.
  struct LinearJob {
    const LinearWeight* w;
    const Tensor* bias;  // or null
    Tensor* out;
  };
  virtual void linear_many(const Tensor& x, const std::vector<LinearJob>& jobs);
  // The rows of prepared weights stacked in one (fused QKV, gate/up
  // projections), or nullopt when they cannot share a matrix (different
  // dtypes or FP8 scales that do not stack). The default stacks plain
  // weights of one dtype.
  virtual std::optional<LinearWeight> stack_linear(const std::vector<const LinearWeight*>& parts);

  // --- ops (outputs are preallocated by the caller; shapes are checked) ---
  // out[T, H] = table[ids[t], :] * scale. ids: i32 [T] on this device.
  virtual void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) = 0;
  // out[M, N] = x[M, K] . w[N, K]^T (+ bias[N], f32). x and out are activations.
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // out = x / rms(x) * (w + weight_offset), per row of x's last dimension.
  // next_linear (here and in add_rms_norm, gated_activation_fused): the
  // linear layer that reads out next as its x, if any, so that a backend may
  // prepare that input in the same pass (the CUDA backend quantises it for
  // FP8 weights there). That layer must come next, as the next linear or
  // linear_many call, with out unchanged; such prepared input serves that
  // one call only.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset,
                        Tensor& out, const LinearWeight* next_linear = nullptr) = 0;
  // residual += x; out = rms_norm(residual) (the pre-norm of the next block).
  virtual void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                            float weight_offset, Tensor& out,
                            const LinearWeight* next_linear = nullptr) = 0;
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
  // --- fused projections (optional: supports_fused_projections()) ---
  // Whether the model should concatenate q/k/v and gate/up weights into one
  // matrix each and use the two ops below (fewer, larger GEMMs and launches).
  virtual bool supports_fused_projections() const { return false; }
  // Splits qkv [T, (heads + 2 * kv_heads) * head_dim] (q, then k, then v
  // columns) into q [T, heads, head_dim] and k, v [T, kv_heads, head_dim].
  // With rope set, q and k are rotated as rope() does. With cache set, k and v
  // go straight to the cache at meta.slot_mapping as write_kv() does (k and v
  // are then not written and may be empty).
  struct QkvRope {
    const Tensor* positions = nullptr;
    const Tensor* inv_freq = nullptr;
    int rotary_dim = 0;
    bool interleaved = false;
    float mscale = 1.0f;
  };
  virtual void split_qkv(const Tensor& qkv, const QkvRope* rope, Tensor& q, Tensor& k, Tensor& v,
                         KvLayerCache* cache, const AttentionMetadata* meta);
  // out[T, I] = act(gate_up[:, :I]) * gate_up[:, I:] for gate_up [T, 2I].
  virtual void gated_activation_fused(const Tensor& gate_up, GatedActivation act, Tensor& out,
                                      const LinearWeight* next_linear = nullptr);

  // out[i, :] = x[rows[i], :]; rows: host indices.
  virtual void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) = 0;
  // x = cap * tanh(x / cap), elementwise.
  virtual void softcap(Tensor& x, float cap) = 0;

  // --- sampling ---
  // Restricts rows of logits [rows, vocab] (f32, bf16 or f16) to allowed
  // tokens: for each i, logits[rows[i], t] = -inf wherever bit t % 32 of
  // words[i * W + t / 32] is clear, W = ceil(vocab / 32) (a TokenConstraint's
  // mask; host arrays). Ordered before later ops like any op. The default
  // edits a host copy; device backends upload the mask and edit in place.
  virtual void apply_token_bitmask(Tensor& logits, const std::vector<int32_t>& rows,
                                   const std::vector<uint32_t>& words);
  // out[r] = the index of the largest value in row r of logits [rows, vocab]
  // (f32, bf16 or f16), the lowest index among equal maxima; NaNs are skipped
  // and a row of only NaNs gives 0. Exactly the token Sampler picks at
  // temperature 0 with nothing else set. Waits for the result like
  // copy_to_host. The default copies the logits to the host
  // (backend/argmax_rows.cpp); device backends reduce in place and copy back
  // only the ids.
  virtual void argmax_rows(const Tensor& logits, std::vector<int32_t>& out);

  // Samples one token for each spec from its row of logits [rows, vocab] (f32,
  // bf16 or f16) on the device, so that only token ids cross to the host.
  // Returns false, doing nothing, when this backend has no device sampler
  // (has_device_sampler(); callers then sample on the host: engine/sampler.h). Semantics per spec,
  // in the Sampler's order: x = logits[row] in f32; the spec's edits
  // (penalties, bias, bans; see LogitEdit); x /= temperature; NaN and -inf are
  // never candidates; top-k keeps the k largest (ties by lowest id); top-p
  // keeps, of those, the shortest prefix in descending order (ties by lowest
  // id) whose probability mass (normalised over the top-k set) reaches top_p,
  // at least one token; min-p keeps those with p >= min_p * p_max, at least
  // one. The draw walks the kept tokens in increasing id order and returns the
  // first whose cumulative mass exceeds uniform * total (masses summed in a
  // fixed order, so a spec's token never depends on the batch). A row with no
  // candidate gives token 0. Waits for the result like copy_to_host.
  virtual bool has_device_sampler() const { return false; }
  virtual bool sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                           const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) {
    (void)logits, (void)specs, (void)edits, (void)out;
    return false;
  }

  // --- a step's tokens kept on the device (the engine's async scheduling) ---
  // The token chosen for each logits row goes to `ids` (int32 [>= rows] on
  // this backend's device) without the host waiting: argmax_rows_to writes
  // every row as argmax_rows would; sample_rows_to then overwrites row
  // spec.row with the spec's draw as sample_rows would (one spec per row;
  // false when there is no device sampler). The next step can read them as
  // its inputs (StepInput::token_source, resolve_token_ids) before the host
  // has them; download_tokens brings them to the host. Work is ordered on the
  // backend's stream, so a buffer may be rewritten by a later step once the
  // steps reading it were issued. Defaults: argmax_rows / sample_rows and
  // host copies (synchronous; the same results).
  virtual void argmax_rows_to(const Tensor& logits, Tensor& ids);
  virtual bool sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                              const std::vector<LogitEdit>& edits, Tensor& ids);
  // ids[i] = src[-ids[i] - 1] for every ids[i] < 0 (int32 tensors on this
  // device; the caller checks -ids[i] - 1 < src.numel()).
  virtual void resolve_token_ids(Tensor& ids, const Tensor& src);
  // Starts copying ids[0, n) to the host; wait() on the result returns them.
  class TokenDownload {
   public:
    virtual ~TokenDownload() = default;
    virtual const std::vector<int32_t>& wait() = 0;
  };
  virtual std::unique_ptr<TokenDownload> download_tokens(const Tensor& ids, int64_t n);

  // --- step timing (the engine's step profile) ---
  // A point in the backend's stream of work, placed after everything queued
  // so far (not while a step is being recorded). The default, for a backend
  // whose ops finish before they return (CPU), is the host clock now.
  class TimingMark {
   public:
    virtual ~TimingMark() = default;
  };
  virtual std::unique_ptr<TimingMark> mark_time();
  // Seconds from mark `from` to mark `to` (placed later) once the device has
  // passed both; nullopt while it has not. Never waits for the device.
  virtual std::optional<double> seconds_between(const TimingMark& from, const TimingMark& to);
  // Whether marks are timed by the device (CUDA events) rather than the host clock.
  virtual bool marks_on_device() const { return false; }
};

// The CPU backend (backend/cpu), using `num_threads` threads (0: all cores).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace loom

namespace loom {

// Copies an f32, bf16 or f16 tensor of any device to host floats (resizing
// `out` to its numel), converting as needed. Synchronises like copy_to_host.
void copy_to_host_f32(Backend& backend, const Tensor& src, std::vector<float>& out);

// Backend::argmax_rows' rule on one host row of n floats: the index of the
// largest value, the lowest among equal maxima, NaNs skipped, 0 when every
// value is NaN.
int32_t argmax_f32(const float* row, int64_t n);

// Rows `rows` of the 2-D tensor x, in that order, gathered into `keep`: a
// buffer the caller holds across calls, (re)allocated only when too small or
// of another dtype or width (grown geometrically). Returns the view of its
// first rows.size() rows, valid until the next call with the same `keep`.
Tensor gather_rows_kept(Backend& backend, const Tensor& x, const std::vector<int32_t>& rows, Tensor& keep);

}  // namespace loom
