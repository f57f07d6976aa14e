// The shared decoder forward pass. Per layer:
//   h = norm(x); q,k,v = h W (+b); [q/k head norm]; rope; write_kv; attention;
//   o = attn W_o (+b); [o = post_attn_norm(o)]; x += o; h = ffn_norm(x);
//   d = down(act(gate h) * up h); [d = post_ffw_norm(d)]; x += d
// with x += o / x += d fused into the next norm (add_rms_norm). Only the
// rows in logit_rows go through the final norm and the output matrix (and
// the rows in hidden_rows through the final norm, for pooling).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/half.h"
#include "model/loader/weights.h"
#include "model/pipeline_parallel.h"
#include "model/tensor_parallel.h"

namespace loom {

struct Transformer::LayerWeights {
  Tensor attn_norm;
  LinearWeight wq, wk, wv, wo;
  std::optional<Tensor> bq, bk, bv, bo;
  // Fused projections (Backend::supports_fused_projections): [q; k; v] and
  // [gate; up] rows in one matrix each; wq..wv, w_gate and w_up are then empty.
  bool fused = false;
  LinearWeight wqkv, w_gate_up;
  std::optional<Tensor> bqkv;
  Tensor q_norm, k_norm;                 // qk_norm
  Tensor post_attention_norm, post_ffw_norm;  // sandwich_norm
  Tensor ffn_norm;
  LinearWeight w_gate, w_up, w_down;
  // FP8 KV cache scales per KV head (the checkpoint's, else 1).
  std::vector<float> k_cache_scale, v_cache_scale;
  AttentionParams attention;
  const Tensor* inv_freq = nullptr;
  const RopeConfig* rope = nullptr;
};

// Activation buffers with room for `capacity` tokens and `logit_capacity`
// logit rows, plus views sized for the current step (rebuilt once per step,
// not per layer).
struct Transformer::Buffers {
  int64_t capacity = 0;
  int64_t logit_capacity = 0;
  Tensor ids, positions;                  // i32 [cap]
  Tensor x, h, o, o_normed, down, down_normed;  // [cap, hidden]
  Tensor q, k, v, q_raw, k_raw, attn;     // [cap, heads * head_dim] / [cap, kv_heads * head_dim]
  Tensor gate, up, act;                   // [cap, intermediate]
  Tensor qkv, gate_up;                    // fused: [cap, q + 2 kv], [cap, 2 intermediate]
  Tensor last_hidden, last_normed;        // [logit_cap, hidden]
  Tensor logits;                          // [logit_cap, vocab]
  int64_t hidden_capacity = 0;
  Tensor pool_hidden, pool_normed;  // [hidden_cap, hidden]: hidden_rows, before / after the norm

  struct Views {
    Tensor ids, positions, x, h, o, o_normed, down, down_normed;
    Tensor q, k, v, q_raw, k_raw, attn;   // [T, n*head_dim] (for matmuls)
    Tensor q3, k3, v3, attn3;             // [T, n, head_dim]
    Tensor q_raw_rows, k_raw_rows, q_rows, k_rows;  // [T * n, head_dim] (for head norms)
    Tensor gate, up, act;
    Tensor qkv, gate_up, q_raw3, k_raw3;  // fused projections
    Tensor last_hidden, last_normed, logits;
    Tensor pool_hidden, pool_normed;  // [hidden_rows.size(), hidden]; empty when none
  } view;
};

// Recorded steps, by (padded batch, padded block-table width, rows per
// sequence), and the padded step they were recorded with (reused to avoid
// allocations).
struct Transformer::Graphs {
  struct Entry {
    bool warmed = false;  // ran once eagerly at this shape (sizes every buffer)
    std::unique_ptr<StepGraph> graph;
  };
  std::map<std::tuple<int32_t, int32_t, int32_t>, Entry> entries;
  StepInput padded;
  // A padded step: the recording's row of each step row, the recording's
  // rows of the step's logit rows, and those rows gathered after the replay.
  std::vector<int32_t> real_rows, out_rows;
  Tensor gathered;
  int64_t buffer_capacity = 0;  // Buffers::capacity the recordings point into
  int64_t logit_capacity = 0;
  std::vector<const void*> cache_memory;  // the KV cache the recordings use (every layer's K and V)
  std::vector<const void*> padded_cache_memory;  // scratch for comparing
  // Piecewise steps (enable_piecewise_steps): recorded pieces by (token
  // bucket, piece; piece 0's `warmed` stands for the bucket), and the padded
  // step.
  std::map<std::pair<int32_t, int32_t>, Entry> pieces;
  StepInput piece_step;
};

namespace {

// Batch buckets of recorded decode steps: 1, 2, 4, 8, then multiples of 8 to
// 256, then of 32.
int32_t batch_bucket(int32_t n) {
  if (n <= 8) {
    int32_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  const int32_t step = n <= 256 ? 8 : 32;
  return (n + step - 1) / step * step;
}

// Token buckets of piecewise steps: multiples of 16 up to 256 tokens, of 64
// up to 1,024, of 128 up to 2,048, then of 256 (at most ~12% padding).
int32_t token_bucket(int32_t n) {
  const int32_t step = n <= 256 ? 16 : n <= 1024 ? 64 : n <= 2048 ? 128 : 256;
  return (n + step - 1) / step * step;
}

// Larger steps run op by op: their GPU time dwarfs the launches.
constexpr int32_t kMaxPiecewiseTokens = 4096;

// Replays `graph`; where there is none, or the backend finds it stale, records
// `ops` into it first. Returns whether it recorded.
template <class Ops>
bool replay_or_record(Backend& be, std::unique_ptr<StepGraph>& graph, Ops&& ops) {
  if (graph && be.replay(*graph)) return false;
  graph.reset();
  be.begin_capture();
  try {
    ops();
  } catch (...) {
    be.abort_capture();
    throw;
  }
  graph = be.end_capture();
  LOOM_CHECK(be.replay(*graph), "a step recorded just now cannot be replayed");
  return true;
}

// The most rows per sequence a recorded step has (a verify step: the last
// known token and up to this many minus one draft tokens).
constexpr int32_t kMaxRecordedRows = 16;

// Block-table widths: powers of two, at least 4.
int32_t width_bucket(int32_t n) {
  int32_t w = 4;
  while (w < n) w *= 2;
  return w;
}

bool is_identity(const std::vector<int32_t>& rows, size_t n) {
  if (rows.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (rows[i] != static_cast<int32_t>(i)) return false;
  return true;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A 1-D weight (norm or bias) as f32 host memory: the ops take f32 vectors.
Tensor vector_as_f32(const Tensor& t, const std::string& name) {
  if (t.dtype() == DType::F32) return t;
  Tensor out = Tensor::cpu(DType::F32, t.shape());
  float* dst = out.data_as<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::F16) {
    const auto* src = t.data_as<const uint16_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  } else if (t.dtype() == DType::BF16) {
    const auto* src = t.data_as<const uint16_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  } else {
    LOOM_THROW("tensor '{}' has type {}; norm and bias vectors must be f32, f16 or bf16", name,
               dtype_name(t.dtype()));
  }
  return out;
}

// An FP8 scale tensor's values as floats (f32, f16 or bf16 of any shape).
std::vector<float> scale_values(const Tensor& t, const std::string& name) {
  const Tensor f = vector_as_f32(t.reshape({t.numel()}), name);
  const float* p = f.data_as<const float>();
  std::vector<float> v(p, p + f.numel());
  for (float x : v)
    if (!(std::isfinite(x) && x > 0))
      LOOM_THROW("tensor '{}' holds scale {}; scales must be finite and > 0", name, x);
  return v;
}

Tensor host_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::cpu(DType::F32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

// The host LinearWeight of `name` ("blk.N.attn_q"): its .weight of shape
// [rows, cols] and, when that is FP8, the scales `q` says it has.
LinearWeight host_linear(const WeightSource& weights, const QuantizationConfig& q,
                         const std::string& name, int64_t rows, int64_t cols) {
  LinearWeight w;
  w.weight = weights.get(name + ".weight", {rows, cols});
  const DType dt = w.weight.dtype();
  if (dt != DType::F8_E4M3) {
    if (q.quantize_at_load) {
      if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16)
        LOOM_THROW("--quantization fp8 quantises f32, f16 or bf16 weights; '{}.weight' is {}", name,
                   dtype_name(dt));
      w.quantize = true;
    }
    return w;
  }
  if (!q.fp8 || q.quantize_at_load)
    LOOM_THROW("tensor '{}.weight' is FP8 but config.json has no FP8 quantization_config", name);
  const std::string scale_name = name + ".weight_scale";
  const std::vector<float> scale = scale_values(weights.get(scale_name), scale_name);
  w.scale_kind = q.weight_scale;
  w.block_n = q.block_n > 0 ? q.block_n : 128;
  w.block_k = q.block_k > 0 ? q.block_k : 128;
  w.activation = q.activation;
  const int64_t expect = q.weight_scale == Fp8WeightScale::Tensor ? 1
                         : q.weight_scale == Fp8WeightScale::Channel
                             ? rows
                             : ceil_div(rows, w.block_n) * ceil_div(cols, w.block_k);
  if (static_cast<int64_t>(scale.size()) != expect)
    LOOM_THROW("tensor '{}' has {} values; a {} FP8 weight [{}, {}] needs {}", scale_name,
               scale.size(), q.describe(), rows, cols, expect);
  w.scale = host_f32(scale, {expect});
  if (q.activation == Fp8Activation::Static) {
    const std::string in_name = name + ".input_scale";
    const std::vector<float> in = scale_values(weights.get(in_name), in_name);
    if (in.size() != 1)
      LOOM_THROW("tensor '{}' has {} values; static activations need one", in_name, in.size());
    w.input_scale = host_f32(in, {1});
  }
  check_fp8_linear(w, name.c_str());
  return w;
}

// A layer's FP8 KV cache scale per KV head: blk.N.kv_cache.{k,v}_scale (or
// kv_scale for both), one value or one per head; 1 when the checkpoint has none.
std::vector<float> kv_cache_scale(const WeightSource& weights, const std::string& layer,
                                  const char* which, int64_t kv_heads) {
  std::string name = layer + "kv_cache." + which;
  std::optional<Tensor> t = weights.find(name);
  if (!t) {
    name = layer + "kv_cache.kv_scale";
    t = weights.find(name);
  }
  if (!t) return std::vector<float>(static_cast<size_t>(kv_heads), 1.0f);
  std::vector<float> v = scale_values(*t, name);
  if (v.size() == 1) v.assign(static_cast<size_t>(kv_heads), v[0]);
  if (static_cast<int64_t>(v.size()) != kv_heads)
    LOOM_THROW("tensor '{}' has {} values; KV cache scales are one value or one per KV head ({})",
               name, v.size(), kv_heads);
  return v;
}

Tensor upload_f32(Backend& backend, const std::vector<float>& values) {
  Tensor t = backend.alloc(DType::F32, {static_cast<int64_t>(values.size())});
  backend.copy_from_host(t, values.data(), values.size() * sizeof(float));
  return t;
}

}  // namespace

Transformer::Transformer(ModelConfig config, const WeightSource& all_weights, Backend& backend,
                         Communicator* tp, const PipelineStage& stage)
    : config_(std::move(config)),
      backend_(backend),
      buffers_(std::make_unique<Buffers>()),
      graphs_(std::make_unique<Graphs>()) {
  config_.validate();
  std::unique_ptr<WeightSource> sliced;
  if (tp != nullptr && tp->size() > 1) {
    const TensorParallelShard shard = plan_tensor_parallel(config_, tp->rank(), tp->size());
    sliced = shard_weights(all_weights, config_, shard);
    config_ = shard_config(config_, shard);
    tp_ = std::make_unique<TensorParallel>(*tp, shard, backend_);
  }
  const int64_t last_layer = stage.last_layer < 0 ? config_.num_layers : stage.last_layer;
  if (stage.first_layer != 0 || last_layer != config_.num_layers) {
    if (stage.link == nullptr)
      LOOM_THROW("layers [{}, {}) of {}: a pipeline stage needs a link to its neighbours",
                 stage.first_layer, last_layer, config_.num_layers);
    first_layer_ = stage.first_layer;
    first_stage_ = stage.first_layer == 0;
    last_stage_ = last_layer == config_.num_layers;
    link_ = stage.link;
    config_ = stage_config(config_, stage.first_layer, last_layer);
  }
  const WeightSource& weights = sliced ? *sliced : all_weights;
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = checked_mul(c.num_heads, c.head_dim);
  const int64_t kv_dim = checked_mul(c.num_kv_heads, c.head_dim);
  const int64_t inter = c.intermediate_size;
  norm_offset_ = c.norm_weight_plus_one ? 1.0f : 0.0f;
  eps_ = static_cast<float>(c.rms_norm_eps);

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    Tensor t = weights.get(name, {rows, cols});
    if (t.dtype() == DType::F8_E4M3)
      LOOM_THROW("tensor '{}' is FP8: loom runs FP8 linear layers, not FP8 embeddings or lm_head",
                 name);
    return backend_.prepare_weight(t);
  };
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols) {
    return backend_.prepare_linear(host_linear(weights, c.quantization, name, rows, cols));
  };
  auto vec = [&](const std::string& name, int64_t n) {
    return backend_.prepare_weight(vector_as_f32(weights.get(name, {n}), name));
  };
  auto optional_vec = [&](const std::string& name, int64_t n) -> std::optional<Tensor> {
    if (!weights.find(name)) return std::nullopt;
    return vec(name, n);
  };

  const int64_t output_rows = tp_ ? tp_->output_rows() : c.vocab_size;
  if (first_stage_ || (last_stage_ && c.tie_word_embeddings))
    token_embd_ = matrix("token_embd.weight", tp_ ? tp_->embedding_rows() : c.vocab_size, hidden);
  if (last_stage_) {
    output_norm_ = vec("output_norm.weight", hidden);
    if (c.tie_word_embeddings) {
      // A vocab shard's embedding table ends in a zero row the lm_head skips.
      output_ = tp_ ? token_embd_.slice_rows(0, output_rows) : token_embd_;
    } else {
      output_ = matrix("output.weight", output_rows, hidden);
    }
  }

  inv_freq_global_ = upload_f32(backend_, c.rope.inv_freq());
  inv_freq_local_ = c.any_sliding() ? upload_f32(backend_, c.rope_local.inv_freq()) : inv_freq_global_;

  const float scale = c.attention_scale > 0 ? c.attention_scale
                                            : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = layers_[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(first_layer_ + i) + ".";
    l.attn_norm = vec(p + "attn_norm.weight", hidden);
    l.wq = linear(p + "attn_q", q_dim, hidden);
    l.wk = linear(p + "attn_k", kv_dim, hidden);
    l.wv = linear(p + "attn_v", kv_dim, hidden);
    l.wo = linear(p + "attn_output", hidden, q_dim);
    if (c.attention_bias) {
      l.bq = vec(p + "attn_q.bias", q_dim);
      l.bk = vec(p + "attn_k.bias", kv_dim);
      l.bv = vec(p + "attn_v.bias", kv_dim);
    }
    l.bo = optional_vec(p + "attn_output.bias", hidden);
    if (c.qk_norm) {
      l.q_norm = vec(p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = vec(p + "attn_k_norm.weight", c.head_dim);
    }
    if (c.sandwich_norm) {
      l.post_attention_norm = vec(p + "post_attention_norm.weight", hidden);
      l.post_ffw_norm = vec(p + "post_ffw_norm.weight", hidden);
    }
    l.ffn_norm = vec(p + "ffn_norm.weight", hidden);
    l.w_gate = linear(p + "ffn_gate", inter, hidden);
    l.w_up = linear(p + "ffn_up", inter, hidden);
    l.w_down = linear(p + "ffn_down", hidden, inter);
    if (backend_.supports_fused_projections()) fuse_projections(l);
    l.k_cache_scale = kv_cache_scale(weights, p, "k_scale", c.num_kv_heads);
    l.v_cache_scale = kv_cache_scale(weights, p, "v_scale", c.num_kv_heads);

    const bool sliding = !c.layer_is_sliding.empty() && c.layer_is_sliding[static_cast<size_t>(i)];
    l.attention.scale = scale;
    l.attention.sliding_window = sliding ? static_cast<int32_t>(c.sliding_window) : 0;
    l.attention.logit_softcap = c.attn_logit_softcap;
    l.inv_freq = sliding ? &inv_freq_local_ : &inv_freq_global_;
    l.rope = sliding ? &c.rope_local : &c.rope;
  }
}

Transformer::~Transformer() = default;

namespace {

// The 1-D tensors (biases) of `parts` stacked in one on the backend's device.
Tensor stack_vectors(Backend& be, const std::vector<const Tensor*>& parts) {
  int64_t n = 0;
  for (const Tensor* t : parts) n += t->numel();
  Tensor out = be.alloc(parts[0]->dtype(), {n});
  int64_t at = 0;
  for (const Tensor* t : parts) {
    Tensor dst = out.slice_rows(at, t->numel());
    be.copy(dst, *t);
    at += t->numel();
  }
  return out;
}

bool same_type(const std::vector<const Tensor*>& parts) {
  for (const Tensor* t : parts)
    if (t->dtype() != parts[0]->dtype() || t->device() != parts[0]->device() || t->ndim() != parts[0]->ndim())
      return false;
  return true;
}

}  // namespace

// The linear layer that reads a layer's attention norm output first.
const LinearWeight* Transformer::qkv_input_of(const LayerWeights& l) {
  return l.fused ? &l.wqkv : &l.wq;
}

void Transformer::fuse_projections(LayerWeights& l) {
  if (l.bq.has_value() != l.bk.has_value() || l.bq.has_value() != l.bv.has_value()) return;
  if (l.bq && !same_type({&*l.bq, &*l.bk, &*l.bv})) return;
  std::optional<LinearWeight> qkv = backend_.stack_linear({&l.wq, &l.wk, &l.wv});
  std::optional<LinearWeight> gate_up = backend_.stack_linear({&l.w_gate, &l.w_up});
  if (!qkv || !gate_up) return;
  l.wqkv = std::move(*qkv);
  l.w_gate_up = std::move(*gate_up);
  if (l.bq) l.bqkv = stack_vectors(backend_, {&*l.bq, &*l.bk, &*l.bv});
  l.wq = l.wk = l.wv = l.w_gate = l.w_up = LinearWeight();
  l.bq.reset();
  l.bk.reset();
  l.bv.reset();
  l.fused = true;
}

int64_t Transformer::kv_cache_bytes_per_block(int64_t block_size, DType dtype) const {
  if (block_size <= 0) LOOM_THROW("KV cache block size must be positive, got {}", block_size);
  const int64_t per_layer = row_bytes(dtype, checked_mul(checked_mul(block_size, config_.num_kv_heads),
                                                          config_.head_dim));
  return checked_mul(checked_mul(per_layer, 2), config_.num_layers);
}

KvCache Transformer::allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) const {
  if (num_blocks <= 0) LOOM_THROW("KV cache needs at least one block, got {}", num_blocks);
  if (block_size <= 0 || block_size > 4096) LOOM_THROW("KV cache block size {} is out of range (1..4096)", block_size);
  checked_mul(kv_cache_bytes_per_block(block_size, dtype), num_blocks);  // overflow check
  KvCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  cache.dtype = dtype;
  cache.layers.reserve(static_cast<size_t>(config_.num_layers));
  const std::vector<int64_t> shape = {num_blocks, block_size, config_.num_kv_heads, config_.head_dim};
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    KvLayerCache layer{backend_.alloc(dtype, shape), backend_.alloc(dtype, shape)};
    if (dtype == DType::F8_E4M3) {
      const LayerWeights& l = layers_[static_cast<size_t>(i)];
      layer.k_scale = upload_f32(backend_, l.k_cache_scale);
      layer.v_scale = upload_f32(backend_, l.v_cache_scale);
    }
    cache.layers.push_back(std::move(layer));
  }
  return cache;
}

void Transformer::check_step(const StepInput& step, const KvCache& cache) const {
  const auto num_tokens = static_cast<int64_t>(step.tokens.size());
  if (num_tokens == 0) LOOM_THROW("forward step has no tokens");
  if (static_cast<int64_t>(step.positions.size()) != num_tokens)
    LOOM_THROW("forward step has {} tokens but {} positions", num_tokens, step.positions.size());
  if (static_cast<int64_t>(cache.layers.size()) != config_.num_layers)
    LOOM_THROW("KV cache has {} layers, model has {}", cache.layers.size(), config_.num_layers);
  const std::vector<int64_t> shape = {cache.num_blocks, cache.block_size, config_.num_kv_heads, config_.head_dim};
  if (cache.layers[0].k.shape() != shape || cache.layers[0].v.shape() != shape)
    LOOM_THROW("KV cache layers have shape {}, expected {}", shape_str(cache.layers[0].k.shape()), shape_str(shape));
  const int64_t source_rows = step.token_source ? step.token_source->numel() : 0;
  if (step.token_source && (step.token_source->dtype() != DType::I32 || tp_ || !first_stage_ || link_))
    LOOM_THROW("a step's token source must be int32 ids of a model on one rank");
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t id = step.tokens[static_cast<size_t>(t)];
    if (id < 0 && -int64_t{id} - 1 < source_rows) continue;  // resolved on the device
    if (id < 0 || id >= config_.vocab_size)
      LOOM_THROW("token id {} at step row {} is outside the vocabulary (size {})", id, t, config_.vocab_size);
  }
  check_attention_metadata(step.attn, num_tokens, cache.block_size, cache.num_blocks);
  // Slots K/V are written to (recorded steps are not checked again by the ops).
  const int64_t slots = cache.num_blocks * cache.block_size;
  for (size_t t = 0; t < step.attn.slot_mapping.size(); ++t)
    if (step.attn.slot_mapping[t] >= slots)
      LOOM_THROW("step row {} writes slot {}, outside the cache's {} slots", t, step.attn.slot_mapping[t], slots);
  // Positions must be where the tokens sit in their sequence: rope and the
  // cache would otherwise disagree.
  const AttentionMetadata& m = step.attn;
  for (int32_t s = 0; s < m.num_seqs; ++s) {
    const int32_t begin = m.query_start[static_cast<size_t>(s)];
    const int32_t end = m.query_start[static_cast<size_t>(s) + 1];
    const int32_t first = m.context_lens[static_cast<size_t>(s)] - (end - begin);
    for (int32_t t = begin; t < end; ++t)
      if (step.positions[static_cast<size_t>(t)] != first + (t - begin))
        LOOM_THROW("step row {} (sequence {}) has position {}, expected {} from its context length", t, s,
                   step.positions[static_cast<size_t>(t)], first + (t - begin));
  }
  if (step.logit_rows.empty()) LOOM_THROW("forward step asks for no logits");
  for (int32_t r : step.logit_rows)
    if (r < 0 || r >= num_tokens) LOOM_THROW("logit row {} is outside the step's {} tokens", r, num_tokens);
  for (int32_t r : step.hidden_rows)
    if (r < 0 || r >= num_tokens)
      LOOM_THROW("hidden row {} is outside the step's {} tokens", r, num_tokens);
  if (!step.hidden_rows.empty() && !last_stage_)
    LOOM_THROW("hidden states are only on the last pipeline stage");
}

void Transformer::ensure_buffers(int64_t tokens, int64_t logit_rows, int64_t hidden_rows) {
  Buffers& b = *buffers_;
  const ModelConfig& c = config_;
  const DType act = backend_.activation_dtype();
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  if (tokens > b.capacity) {
    // Grow geometrically so a slowly growing step size reallocates rarely.
    const int64_t cap = std::max(tokens, std::min<int64_t>(b.capacity * 2, int64_t{1} << 20));
    b.ids = backend_.alloc(DType::I32, {cap});
    b.positions = backend_.alloc(DType::I32, {cap});
    for (Tensor* t : {&b.x, &b.h, &b.o, &b.o_normed, &b.down, &b.down_normed})
      *t = backend_.alloc(act, {cap, c.hidden_size});
    for (Tensor* t : {&b.q, &b.attn}) *t = backend_.alloc(act, {cap, q_dim});
    for (Tensor* t : {&b.k, &b.v}) *t = backend_.alloc(act, {cap, kv_dim});
    if (c.qk_norm) {
      b.q_raw = backend_.alloc(act, {cap, q_dim});
      b.k_raw = backend_.alloc(act, {cap, kv_dim});
    }
    for (Tensor* t : {&b.gate, &b.up, &b.act}) *t = backend_.alloc(act, {cap, c.intermediate_size});
    // Any fused layer needs them (FP8 checkpoints may fuse some layers only).
    if (std::any_of(layers_.begin(), layers_.end(), [](const LayerWeights& l) { return l.fused; })) {
      b.qkv = backend_.alloc(act, {cap, q_dim + 2 * kv_dim});
      b.gate_up = backend_.alloc(act, {cap, 2 * c.intermediate_size});
    }
    b.capacity = cap;
  }
  if (last_stage_ && logit_rows > b.logit_capacity) {  // earlier pipeline stages have no logits
    const int64_t cap = std::max(logit_rows, std::min<int64_t>(b.logit_capacity * 2, int64_t{1} << 16));
    b.last_hidden = backend_.alloc(act, {cap, c.hidden_size});
    b.last_normed = backend_.alloc(act, {cap, c.hidden_size});
    b.logits = backend_.alloc(act, {cap, c.vocab_size});
    b.logit_capacity = cap;
  }
  if (hidden_rows > b.hidden_capacity) {
    const int64_t cap =
        std::max(hidden_rows, std::min<int64_t>(b.hidden_capacity * 2, int64_t{1} << 20));
    b.pool_hidden = backend_.alloc(act, {cap, c.hidden_size});
    b.pool_normed = backend_.alloc(act, {cap, c.hidden_size});
    b.hidden_capacity = cap;
  }

  Buffers::Views& v = b.view;
  const int64_t T = tokens;
  v.ids = b.ids.slice_rows(0, T);
  v.positions = b.positions.slice_rows(0, T);
  v.x = b.x.slice_rows(0, T);
  v.h = b.h.slice_rows(0, T);
  v.o = b.o.slice_rows(0, T);
  v.o_normed = b.o_normed.slice_rows(0, T);
  v.down = b.down.slice_rows(0, T);
  v.down_normed = b.down_normed.slice_rows(0, T);
  v.q = b.q.slice_rows(0, T);
  v.k = b.k.slice_rows(0, T);
  v.v = b.v.slice_rows(0, T);
  v.attn = b.attn.slice_rows(0, T);
  v.q3 = v.q.reshape({T, c.num_heads, c.head_dim});
  v.k3 = v.k.reshape({T, c.num_kv_heads, c.head_dim});
  v.v3 = v.v.reshape({T, c.num_kv_heads, c.head_dim});
  v.attn3 = v.attn.reshape({T, c.num_heads, c.head_dim});
  if (c.qk_norm) {
    v.q_raw = b.q_raw.slice_rows(0, T);
    v.k_raw = b.k_raw.slice_rows(0, T);
    v.q_raw_rows = v.q_raw.reshape({T * c.num_heads, c.head_dim});
    v.k_raw_rows = v.k_raw.reshape({T * c.num_kv_heads, c.head_dim});
    v.q_rows = v.q.reshape({T * c.num_heads, c.head_dim});
    v.k_rows = v.k.reshape({T * c.num_kv_heads, c.head_dim});
  }
  if (b.qkv.data() != nullptr) {
    v.qkv = b.qkv.slice_rows(0, T);
    v.gate_up = b.gate_up.slice_rows(0, T);
  }
  if (c.qk_norm) {
    v.q_raw3 = v.q_raw.reshape({T, c.num_heads, c.head_dim});
    v.k_raw3 = v.k_raw.reshape({T, c.num_kv_heads, c.head_dim});
  }
  v.gate = b.gate.slice_rows(0, T);
  v.up = b.up.slice_rows(0, T);
  v.act = b.act.slice_rows(0, T);
  if (last_stage_) {
    v.last_hidden = b.last_hidden.slice_rows(0, logit_rows);
    v.last_normed = b.last_normed.slice_rows(0, logit_rows);
    v.logits = b.logits.slice_rows(0, logit_rows);
  }
  v.pool_hidden = hidden_rows > 0 ? b.pool_hidden.slice_rows(0, hidden_rows) : Tensor();
  v.pool_normed = hidden_rows > 0 ? b.pool_normed.slice_rows(0, hidden_rows) : Tensor();
}

void Transformer::enable_step_graphs(int32_t max_batch) {
  // Not with tensor parallelism yet: recording NCCL collectives is untested.
  graph_max_batch_ = backend_.supports_capture() && !tp_ && !link_ ? std::max(0, max_batch) : 0;
  graphs_->entries.clear();
}

void Transformer::enable_piecewise_steps(int32_t max_tokens) {
  piecewise_max_tokens_ = !tp_ && !link_ ? std::clamp(max_tokens, 0, kMaxPiecewiseTokens) : 0;
  graphs_->pieces.clear();
}

void Transformer::forget_stale_recordings(const KvCache& cache) {
  Graphs& g = *graphs_;
  std::vector<const void*>& cache_memory = g.padded_cache_memory;
  cache_memory.clear();
  for (const KvLayerCache& l : cache.layers) {
    cache_memory.push_back(l.k.data());
    cache_memory.push_back(l.v.data());
  }
  if (g.buffer_capacity != buffers_->capacity || g.logit_capacity != buffers_->logit_capacity ||
      g.cache_memory != cache_memory) {
    // The recordings point at other activation buffers or another cache.
    g.entries.clear();
    g.pieces.clear();
    g.buffer_capacity = buffers_->capacity;
    g.logit_capacity = buffers_->logit_capacity;
    g.cache_memory.swap(cache_memory);
  }
}

std::optional<Tensor> Transformer::forward_piecewise(const StepInput& step, KvCache& cache) {
  const AttentionMetadata& m = step.attn;
  const auto T = static_cast<int32_t>(step.tokens.size());
  const int32_t N = m.num_seqs;
  if (T > piecewise_max_tokens_ || N <= 0 || !step.hidden_rows.empty() || !last_stage_ ||
      m.query_start.size() != size_t(N) + 1 || m.context_lens.size() < size_t(N) ||
      m.slot_mapping.size() != size_t(T) || m.max_blocks_per_seq < 0 ||
      m.block_tables.size() < size_t(N) * size_t(m.max_blocks_per_seq))
    return std::nullopt;  // other steps, or malformed ones (the eager path reports those)
  const auto start = timing_now();

  // The step padded to its bucket: its rows as they are, then P - T rows of
  // one more sequence at positions 0.. with as many keys, all in block 0,
  // writing nothing (slot -1). Attention is row by row and sequence by
  // sequence, and every other op row by row, so a real row's values are
  // those of the step unpadded.
  const int32_t P = token_bucket(T), pad = P - T;
  Graphs& g = *graphs_;
  // A step already at its bucket's size runs as it is.
  const StepInput& p = pad == 0 ? step : g.piece_step;
  if (pad > 0) {
    StepInput& q = g.piece_step;
    AttentionMetadata& qm = q.attn;
    q.tokens.assign(step.tokens.begin(), step.tokens.end());
    q.tokens.resize(size_t(P), 0);
    q.positions.assign(step.positions.begin(), step.positions.end());
    for (int32_t j = 0; j < pad; ++j) q.positions.push_back(j);
    q.logit_rows = step.logit_rows;
    q.hidden_rows.clear();
    q.token_source = step.token_source;
    qm.slot_mapping.assign(m.slot_mapping.begin(), m.slot_mapping.end());
    qm.slot_mapping.resize(size_t(P), -1);
    qm.max_context_bound = m.max_context_bound > 0 ? std::max(m.max_context_bound, pad) : 0;
    qm.query_start.assign(m.query_start.begin(), m.query_start.end());
    qm.query_start.push_back(P);
    qm.context_lens.assign(m.context_lens.begin(), m.context_lens.begin() + N);
    qm.context_lens.push_back(pad);
    const auto pad_blocks = static_cast<int32_t>(ceil_div(pad, cache.block_size));
    const int32_t W = std::max(m.max_blocks_per_seq, pad_blocks);
    qm.num_seqs = N + 1;
    qm.max_blocks_per_seq = W;
    qm.block_tables.assign(size_t(N + 1) * size_t(W), 0);
    for (int32_t s = 0; s < N; ++s)
      std::copy_n(m.block_tables.begin() + ptrdiff_t(size_t(s) * size_t(m.max_blocks_per_seq)),
                  m.max_blocks_per_seq, qm.block_tables.begin() + ptrdiff_t(size_t(s) * size_t(W)));
  }

  ensure_buffers(P, static_cast<int64_t>(p.logit_rows.size()));
  forget_stale_recordings(cache);
  upload_inputs(p, cache);
  const auto uploaded = timing_now();
  bool& warmed = g.pieces[std::make_pair(P, 0)].warmed;
  if (!backend_.supports_capture() || !warmed) {
    // A backend that cannot record runs the pieces as they come; with one
    // that can, a bucket's first step sizes the backend's workspaces.
    run_ops(p, cache);
    warmed = true;
    graph_stats_.piecewise++;
    record_forward_timing(start, uploaded, false);
    return buffers_->view.logits;
  }
  const auto layers = static_cast<int32_t>(layers_.size());
  for (int32_t piece = 0; piece <= layers; ++piece) {
    if (replay_or_record(backend_, g.pieces[std::make_pair(P, piece)].graph,
                         [&] { run_piece(size_t(piece), p, cache); }))
      graph_stats_.recorded++;
    if (piece < layers) run_attention(size_t(piece), p, cache);
  }
  run_head(p);
  graph_stats_.piecewise++;
  record_forward_timing(start, uploaded, true);
  return buffers_->view.logits;
}

Tensor Transformer::forward(const StepInput& step, KvCache& cache) {
  check_step(step, cache);
  forward_timing_ = ForwardTiming{};
  if (graph_max_batch_ > 0)
    if (std::optional<Tensor> logits = forward_recorded(step, cache)) return *logits;
  if (piecewise_max_tokens_ > 0)
    if (std::optional<Tensor> logits = forward_piecewise(step, cache)) return *logits;
  const auto start = timing_now();
  ensure_buffers(static_cast<int64_t>(step.tokens.size()),
                 static_cast<int64_t>(step.logit_rows.size()),
                 static_cast<int64_t>(step.hidden_rows.size()));
  upload_inputs(step, cache);
  const auto uploaded = timing_now();
  run_ops(step, cache);
  record_forward_timing(start, uploaded, false);
  graph_stats_.eager++;
  return last_stage_ ? buffers_->view.logits : buffers_->view.x;
}

std::chrono::steady_clock::time_point Transformer::timing_now() const {
  return time_forward_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
}

void Transformer::record_forward_timing(std::chrono::steady_clock::time_point start,
                                        std::chrono::steady_clock::time_point uploaded,
                                        bool replayed) {
  if (!time_forward_) return;
  const auto end = std::chrono::steady_clock::now();
  forward_timing_.upload_s = std::chrono::duration<double>(uploaded - start).count();
  forward_timing_.launch_s = std::chrono::duration<double>(end - uploaded).count();
  forward_timing_.replayed = replayed;
}

Tensor Transformer::hidden_states() const {
  return buffers_->view.pool_normed;
}

void Transformer::upload_inputs(const StepInput& step, const KvCache& cache) {
  const auto T = static_cast<int64_t>(step.tokens.size());
  Buffers::Views& v = buffers_->view;
  backend_.copy_from_host(v.ids, tp_ ? tp_->embedding_ids(step.tokens) : step.tokens.data(),
                          static_cast<size_t>(T) * sizeof(int32_t));
  if (step.token_source && std::any_of(step.tokens.begin(), step.tokens.end(), [](int32_t t) { return t < 0; })) {
    Tensor ids = v.ids.slice_rows(0, T);
    backend_.resolve_token_ids(ids, *step.token_source);
  }
  backend_.copy_from_host(v.positions, step.positions.data(), static_cast<size_t>(T) * sizeof(int32_t));
  backend_.prepare_attention(step.attn, T, cache.block_size, cache.num_blocks);
}

std::optional<Tensor> Transformer::forward_recorded(const StepInput& step, KvCache& cache) {
  const AttentionMetadata& m = step.attn;
  const auto T = static_cast<int32_t>(step.tokens.size());
  const int32_t N = m.num_seqs;
  // The recording computes every row's logits, then the step's are gathered:
  // worth it while the step asks for at least a quarter of its rows (a
  // draft model catching up on its accepted tokens asks for each sequence's
  // last; a prompt's chunk only for its last row).
  const auto wanted = static_cast<int32_t>(step.logit_rows.size());
  if (N <= 0 || N > graph_max_batch_ || wanted == 0 || int64_t(wanted) * 4 < T || !step.hidden_rows.empty() ||
      m.query_start.size() != size_t(N) + 1 || m.context_lens.size() < size_t(N) || m.query_start[0] != 0 ||
      m.query_start[size_t(N)] != T)
    return std::nullopt;  // other steps, or malformed ones (the eager path reports those)
  for (int32_t r : step.logit_rows)
    if (r < 0 || r >= T) return std::nullopt;
  // Q rows per sequence: 1 in a decode step; in a step verifying draft tokens,
  // the most new tokens of any sequence. A sequence with fewer is padded at
  // the front with rows at its earlier positions, which attend like any row
  // but write no K/V and whose logits are dropped; so it needs Q positions.
  int32_t Q = 1;
  for (int32_t s = 0; s < N; ++s) {
    const int32_t q = m.query_start[size_t(s) + 1] - m.query_start[size_t(s)];
    if (q < 1) return std::nullopt;
    Q = std::max(Q, q);
  }
  if (Q > kMaxRecordedRows) return std::nullopt;
  for (int32_t s = 0; s < N && Q > 1; ++s)
    if (m.context_lens[size_t(s)] < Q) return std::nullopt;
  int32_t max_blocks = 1;
  for (int32_t s = 0; s < N; ++s)
    max_blocks = std::max<int32_t>(
        max_blocks, static_cast<int32_t>((m.context_lens[size_t(s)] + cache.block_size - 1) / cache.block_size));
  if (max_blocks > m.max_blocks_per_seq || m.block_tables.size() < size_t(N) * size_t(m.max_blocks_per_seq))
    return std::nullopt;  // malformed: the eager path reports it
  const int32_t B = batch_bucket(N);
  // Wide enough for a padding sequence's Q keys too.
  const int32_t W = width_bucket(std::max(max_blocks, static_cast<int32_t>(ceil_div(Q, cache.block_size))));
  if (B > graph_max_batch_ && B != N) return std::nullopt;
  if (static_cast<int64_t>(W) * cache.block_size > INT32_MAX) return std::nullopt;
  const auto start = timing_now();

  // The padded step, sequence s in rows [s * Q, (s + 1) * Q): its q new
  // tokens last, after Q - q front rows at the positions before them (token
  // 0, slot -1). Sequences past N decode token 0 at positions 0..Q-1 with a
  // context of Q keys (block 0), and write nothing.
  Graphs& g = *graphs_;
  StepInput& p = g.padded;
  AttentionMetadata& pm = p.attn;
  const auto rows = static_cast<size_t>(B) * static_cast<size_t>(Q);
  p.tokens.assign(rows, 0);
  p.positions.resize(rows);
  pm.slot_mapping.assign(rows, -1);
  p.token_source = step.token_source;
  p.logit_rows.resize(rows);
  for (size_t r = 0; r < rows; ++r) p.logit_rows[r] = static_cast<int32_t>(r);
  g.real_rows.clear();
  pm.num_seqs = B;
  pm.query_start.resize(size_t(B) + 1);
  for (int32_t s = 0; s <= B; ++s) pm.query_start[size_t(s)] = s * Q;
  pm.context_lens.assign(m.context_lens.begin(), m.context_lens.begin() + N);
  pm.context_lens.resize(size_t(B), Q);
  pm.max_blocks_per_seq = W;
  pm.max_context_bound = static_cast<int32_t>(static_cast<int64_t>(W) * cache.block_size);
  pm.block_tables.assign(size_t(B) * size_t(W), 0);
  for (int32_t s = 0; s < B; ++s) {
    const size_t first = size_t(s) * size_t(Q);
    const int32_t context = pm.context_lens[size_t(s)];
    for (int32_t j = 0; j < Q; ++j) p.positions[first + size_t(j)] = context - Q + j;
    if (s >= N) continue;
    const int32_t from = m.query_start[size_t(s)], q = m.query_start[size_t(s) + 1] - from;
    const size_t at = first + size_t(Q - q);
    std::copy_n(step.tokens.begin() + from, q, p.tokens.begin() + static_cast<ptrdiff_t>(at));
    std::copy_n(m.slot_mapping.begin() + from, q, pm.slot_mapping.begin() + static_cast<ptrdiff_t>(at));
    std::copy_n(step.positions.begin() + from, q, p.positions.begin() + static_cast<ptrdiff_t>(at));
    for (int32_t i = 0; i < q; ++i) g.real_rows.push_back(static_cast<int32_t>(at) + i);
    const int32_t need = static_cast<int32_t>((context + cache.block_size - 1) / cache.block_size);
    std::copy_n(m.block_tables.begin() + static_cast<ptrdiff_t>(size_t(s) * size_t(m.max_blocks_per_seq)), need,
                pm.block_tables.begin() + static_cast<ptrdiff_t>(size_t(s) * size_t(W)));
  }

  ensure_buffers(static_cast<int64_t>(rows), static_cast<int64_t>(rows));
  forget_stale_recordings(cache);
  upload_inputs(p, cache);
  const auto uploaded = timing_now();
  Graphs::Entry& e = g.entries[{B, W, Q}];
  bool replayed = false;
  if (!e.warmed) {
    run_ops(p, cache);  // sizes the backend's workspaces for this shape
    e.warmed = true;
    graph_stats_.eager++;
  } else {
    if (replay_or_record(backend_, e.graph, [&] { run_ops(p, cache); })) graph_stats_.recorded++;
    graph_stats_.replayed++;
    if (Q > 1) graph_stats_.replayed_multi_row++;
    replayed = true;
  }
  record_forward_timing(start, uploaded, replayed);
  // The step's logit rows in the recording's rows (real_rows: step row r is
  // recording row real_rows[r]).
  g.out_rows.resize(size_t(wanted));
  for (int32_t j = 0; j < wanted; ++j) g.out_rows[size_t(j)] = g.real_rows[size_t(step.logit_rows[size_t(j)])];
  const Tensor& logits = buffers_->view.logits;
  if (is_identity(g.out_rows, size_t(wanted))) return logits.slice_rows(0, wanted);
  return gather_rows_kept(backend_, logits, g.out_rows, g.gathered);
}

void Transformer::run_ops(const StepInput& step, KvCache& cache) {
  const auto layers = layers_.size();
  for (size_t piece = 0; piece <= layers; ++piece) {
    run_piece(piece, step, cache);
    if (piece < layers) run_attention(piece, step, cache);
  }
  run_head(step);
}

// Piece 0: the embedding (or the previous stage's hidden states), the first
// norm and layer 0 up to its attention; piece i (0 < i < L): the rest of
// layer i - 1 and layer i up to its attention; piece L: the rest of the last
// layer.
void Transformer::run_piece(size_t piece, const StepInput& step, KvCache& cache) {
  const ModelConfig& c = config_;
  Buffers::Views& v = buffers_->view;
  Backend& be = backend_;
  const AttentionMetadata& meta = step.attn;

  if (piece == 0) {
    if (first_stage_) {
      be.embedding(token_embd_, v.ids, c.embedding_scale, v.x);
      if (tp_) tp_->reduce_embedding(v.x);
    } else {
      link_->receive_hidden(v.x);  // the previous stage's residual stream
    }
    be.rms_norm(v.x, layers_[0].attn_norm, eps_, norm_offset_, v.h, qkv_input_of(layers_[0]));
  } else {
    // The rest of layer i = piece - 1: o-proj, the MLP block, the residuals.
    const size_t i = piece - 1;
    const LayerWeights& l = layers_[i];
    const GatedActivation act = c.activation == Activation::GeluTanh ? GatedActivation::GeluTanh
                                                                      : GatedActivation::Silu;
    be.linear(v.attn, l.wo, l.bo ? &*l.bo : nullptr, v.o);
    if (tp_) tp_->all_reduce(v.o);  // row-parallel: partial sums
    Tensor* attn_out = &v.o;
    if (c.sandwich_norm) {
      be.rms_norm(v.o, l.post_attention_norm, eps_, norm_offset_, v.o_normed);
      attn_out = &v.o_normed;
    }
    be.add_rms_norm(*attn_out, v.x, l.ffn_norm, eps_, norm_offset_, v.h,
                    l.fused ? &l.w_gate_up : &l.w_gate);

    // MLP block.
    if (l.fused) {
      be.linear(v.h, l.w_gate_up, nullptr, v.gate_up);
      be.gated_activation_fused(v.gate_up, act, v.act, &l.w_down);
    } else {
      be.linear_many(v.h, {{&l.w_gate, nullptr, &v.gate}, {&l.w_up, nullptr, &v.up}});
      be.gated_activation(v.gate, v.up, act, v.act);
    }
    be.linear(v.act, l.w_down, nullptr, v.down);
    if (tp_) tp_->all_reduce(v.down);  // row-parallel: partial sums
    Tensor* mlp_out = &v.down;
    if (c.sandwich_norm) {
      be.rms_norm(v.down, l.post_ffw_norm, eps_, norm_offset_, v.down_normed);
      mlp_out = &v.down_normed;
    }
    if (piece < layers_.size()) {
      be.add_rms_norm(*mlp_out, v.x, layers_[piece].attn_norm, eps_, norm_offset_, v.h,
                      qkv_input_of(layers_[piece]));
    } else {
      be.add(v.x, *mlp_out);
      return;
    }
  }

  // Layer `piece` up to its attention: q, k, v (rotated; k and v into the cache).
  const LayerWeights& l = layers_[piece];
  KvLayerCache& kv = cache.layers[piece];
  const float mscale = l.rope->attention_scale();
  if (l.fused && !c.qk_norm) {
    // One GEMM, then q and k rotated on the way out and k, v written
    // straight into the cache.
    be.linear(v.h, l.wqkv, l.bqkv ? &*l.bqkv : nullptr, v.qkv);
    Backend::QkvRope r{&v.positions, l.inv_freq, l.rope->rotary_dim, l.rope->interleaved, mscale};
    be.split_qkv(v.qkv, &r, v.q3, v.k3, v.v3, &kv, &meta);
    return;
  }
  Tensor& q_out = c.qk_norm ? v.q_raw : v.q;
  Tensor& k_out = c.qk_norm ? v.k_raw : v.k;
  if (l.fused) {
    be.linear(v.h, l.wqkv, l.bqkv ? &*l.bqkv : nullptr, v.qkv);
    be.split_qkv(v.qkv, nullptr, v.q_raw3, v.k_raw3, v.v3, nullptr, nullptr);
  } else {
    be.linear_many(v.h, {{&l.wq, l.bq ? &*l.bq : nullptr, &q_out},
                         {&l.wk, l.bk ? &*l.bk : nullptr, &k_out},
                         {&l.wv, l.bv ? &*l.bv : nullptr, &v.v}});
  }
  if (c.qk_norm) {
    be.rms_norm(v.q_raw_rows, l.q_norm, eps_, norm_offset_, v.q_rows);
    be.rms_norm(v.k_raw_rows, l.k_norm, eps_, norm_offset_, v.k_rows);
  }
  be.rope(v.q3, v.positions, *l.inv_freq, l.rope->rotary_dim, l.rope->interleaved, mscale);
  be.rope(v.k3, v.positions, *l.inv_freq, l.rope->rotary_dim, l.rope->interleaved, mscale);
  be.write_kv(v.k3, v.v3, kv, meta);
}

void Transformer::run_attention(size_t layer, const StepInput& step, KvCache& cache) {
  Buffers::Views& v = buffers_->view;
  backend_.paged_attention(v.q3, cache.layers[layer], step.attn, layers_[layer].attention, v.attn3);
}

void Transformer::run_head(const StepInput& step) {
  Buffers::Views& v = buffers_->view;
  Backend& be = backend_;
  if (!last_stage_) {
    link_->send_hidden(v.x);
    return;
  }
  if (!step.hidden_rows.empty()) {
    be.gather_rows(v.x, step.hidden_rows, v.pool_hidden);
    be.rms_norm(v.pool_hidden, output_norm_, eps_, norm_offset_, v.pool_normed);
  }
  // Only the rows that need logits go through the final norm and lm_head.
  if (is_identity(step.logit_rows, step.tokens.size())) {
    be.rms_norm(v.x, output_norm_, eps_, norm_offset_, v.last_normed);
  } else {
    be.gather_rows(v.x, step.logit_rows, v.last_hidden);
    be.rms_norm(v.last_hidden, output_norm_, eps_, norm_offset_, v.last_normed);
  }
  if (tp_) {
    tp_->lm_head(v.last_normed, output_, v.logits);  // vocab-parallel: gathered
  } else {
    be.matmul(v.last_normed, output_, nullptr, v.logits);
  }
  if (config_.final_logit_softcap > 0) be.softcap(v.logits, config_.final_logit_softcap);
}

}  // namespace loom
