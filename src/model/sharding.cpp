// Tensor-parallel shard planning and the slicing WeightSource (sharding.h).
#include "model/sharding.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "model/loader/weights.h"

namespace loom {

TensorParallelShard plan_tensor_parallel(const ModelConfig& c, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    LOOM_THROW("tensor parallelism: rank {} is outside a group of {}", rank, size);
  TensorParallelShard s;
  s.rank = rank;
  s.size = size;
  if (c.num_heads % size != 0)
    LOOM_THROW("tensor-parallel size {} does not divide the model's {} attention heads", size,
               c.num_heads);
  s.num_heads = c.num_heads / size;
  s.heads_begin = rank * s.num_heads;
  if (c.num_kv_heads % size == 0) {
    s.num_kv_heads = c.num_kv_heads / size;
    s.kv_heads_begin = rank * s.num_kv_heads;
  } else if (size % c.num_kv_heads == 0) {
    // Fewer KV heads than ranks: this rank's query heads all read the same
    // KV head (group size is a multiple of the per-rank head count).
    s.kv_replicated = true;
    s.num_kv_heads = 1;
    s.kv_heads_begin = int64_t{rank} * c.num_kv_heads / size;
  } else {
    LOOM_THROW("tensor-parallel size {} and the model's {} KV heads: neither divides the other",
               size, c.num_kv_heads);
  }
  if (c.intermediate_size % size != 0)
    LOOM_THROW("tensor-parallel size {} does not divide the MLP intermediate size {}", size,
               c.intermediate_size);
  s.inter_size = c.intermediate_size / size;
  s.inter_begin = rank * s.inter_size;
  s.vocab_parallel = c.vocab_size % size == 0;
  s.vocab_rows = s.vocab_parallel ? c.vocab_size / size : c.vocab_size;
  s.vocab_begin = s.vocab_parallel ? rank * s.vocab_rows : 0;
  return s;
}

ModelConfig shard_config(const ModelConfig& config, const TensorParallelShard& s) {
  ModelConfig c = config;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.intermediate_size = s.inter_size;
  // The attention scale depends on head_dim only, which does not change.
  return c;
}

namespace {

// Elements [begin, begin + count) of a 1-D tensor (a bias): a view.
Tensor slice_vector(const Tensor& t, const std::string& name, int64_t begin, int64_t count) {
  if (t.ndim() != 1 || begin + count > t.dim(0))
    LOOM_THROW("tensor '{}' has shape {}; cannot take elements [{}, {})", name,
               shape_str(t.shape()), begin, begin + count);
  return t.slice_rows(begin, count);
}

// Rows [begin, begin + count) of a 2-D weight: a view of the mapped file.
Tensor slice_rows(const Tensor& t, const std::string& name, int64_t begin, int64_t count) {
  if (t.ndim() != 2 || begin + count > t.dim(0))
    LOOM_THROW("tensor '{}' has shape {}; cannot take rows [{}, {})", name, shape_str(t.shape()),
               begin, begin + count);
  return t.slice_rows(begin, count);
}

// Columns [begin, begin + count) of a 2-D weight [N, K]: a new [N, count]
// tensor, reading only those bytes of each row. Quantised rows are cut on
// block boundaries only.
Tensor slice_cols(const Tensor& t, const std::string& name, int64_t begin, int64_t count) {
  if (t.ndim() != 2 || begin + count > t.dim(1))
    LOOM_THROW("tensor '{}' has shape {}; cannot take columns [{}, {})", name, shape_str(t.shape()),
               begin, begin + count);
  const DTypeInfo& info = dtype_info(t.dtype());
  if (begin % info.block_elems != 0 || count % info.block_elems != 0)
    LOOM_THROW(
        "tensor-parallel slice of '{}' ({}): columns [{}, {}) do not fall on its {}-value "
        "block boundaries; use another --tensor-parallel-size or an unquantised model",
        name, dtype_name(t.dtype()), begin, begin + count, info.block_elems);
  const int64_t rows = t.dim(0);
  const int64_t src_stride = t.row_stride_bytes();
  const int64_t offset = row_bytes(t.dtype(), begin);
  const int64_t bytes = row_bytes(t.dtype(), count);
  Tensor out = Tensor::cpu(t.dtype(), {rows, count});
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * bytes, src + r * src_stride + offset, size_t(bytes));
  return out;
}

// Rows [begin, begin + count) plus one row of zeros (the embedding of ids
// that belong to another rank). Zero bytes decode to 0 in every supported
// type, quantised blocks included (their scales are 0).
Tensor slice_rows_with_zero_row(const Tensor& t, const std::string& name, int64_t begin,
                                int64_t count) {
  const Tensor rows = slice_rows(t, name, begin, count);
  Tensor out = Tensor::cpu(t.dtype(), {count + 1, t.dim(1)});
  std::memcpy(out.data(), rows.data(), size_t(rows.nbytes()));
  return out;
}

// This rank's part of a linear layer's [N, K] weight: rows [begin, begin +
// count) of N (column-parallel) or columns of K (row-parallel), of `full`.
struct LayerSlice {
  bool rows = true;
  int64_t begin = 0, count = 0, full = 0;
};

// An FP8 weight's scales for slice `s` of its weight: per-tensor scales are
// every rank's; per-channel ones (one per row, [N] or [N, 1]) follow a row
// slice and are every rank's under a column slice; 128x128-block ones
// ([ceil(N / bn), ceil(K / bk)]) follow either, which must then start on a
// block boundary and end on one or at the weight's edge.
Tensor slice_fp8_scales(const Tensor& t, const std::string& name, const QuantizationConfig& q,
                        const LayerSlice& s) {
  if (q.weight_scale == Fp8WeightScale::Tensor) return t;
  if (q.weight_scale == Fp8WeightScale::Channel) {
    if (!s.rows) return t;
    return slice_vector(t.reshape({t.numel()}), name, s.begin, s.count);
  }
  const int64_t block =
      s.rows ? (q.block_n > 0 ? q.block_n : 128) : (q.block_k > 0 ? q.block_k : 128);
  const int64_t end = s.begin + s.count;
  if (s.begin % block != 0 || (end % block != 0 && end != s.full))
    LOOM_THROW(
        "tensor-parallel slice of '{}': {} [{}, {}) of the weight do not fall on its {}-value "
        "scale blocks; use another --tensor-parallel-size",
        name, s.rows ? "rows" : "columns", s.begin, end, block);
  const int64_t first = s.begin / block, count = (end + block - 1) / block - first;
  return s.rows ? slice_rows(t, name, first, count) : slice_cols(t, name, first, count);
}

class ShardedWeights final : public WeightSource {
 public:
  ShardedWeights(const WeightSource& full, const ModelConfig& c, const TensorParallelShard& s)
      : full_(full), c_(c), s_(s) {}

  std::optional<Tensor> find(const std::string& name) const override {
    std::optional<Tensor> t = full_.find(name);
    if (!t) return t;
    if (name == "token_embd.weight") {
      if (!s_.vocab_parallel) return t;
      return slice_rows_with_zero_row(*t, name, s_.vocab_begin, s_.vocab_rows);
    }
    if (name == "output.weight") {
      if (!s_.vocab_parallel) return t;
      return slice_rows(*t, name, s_.vocab_begin, s_.vocab_rows);
    }
    if (name.rfind("blk.", 0) != 0) return t;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return t;
    // blk.N.<module>.<suffix>: weight, bias, weight_scale, input_scale; kv_cache.<which>.
    const std::string_view part = std::string_view(name).substr(dot + 1);
    const size_t dot2 = part.find('.');
    if (dot2 == std::string_view::npos) return t;
    const std::string_view module = part.substr(0, dot2), suffix = part.substr(dot2 + 1);
    if (module == "kv_cache") {
      // One scale for every KV head, or one per KV head: this rank's.
      if (t->numel() == 1) return t;
      if (t->numel() != c_.num_kv_heads)
        LOOM_THROW(
            "tensor '{}' has {} values; KV cache scales are one value or one per KV head ({})",
            name, t->numel(), c_.num_kv_heads);
      return slice_vector(t->reshape({t->numel()}), name, s_.kv_heads_begin, s_.num_kv_heads);
    }
    const std::optional<LayerSlice> sl = layer_slice(module);
    if (!sl) return t;  // norms: replicated
    const bool mlp = module.starts_with("ffn_");
    if (suffix == "weight")
      return sl->rows ? slice_rows(*t, name, sl->begin, sl->count)
                      : slice_cols(*t, name, sl->begin, sl->count);
    // A row-parallel bias is added once to the sum of the ranks' partial outputs.
    if (suffix == "bias" && !mlp)
      return sl->rows ? slice_vector(*t, name, sl->begin, sl->count)
                      : (s_.rank == 0 ? t : std::nullopt);
    if (suffix == "weight_scale") return slice_fp8_scales(*t, name, c_.quantization, *sl);
    if (suffix == "input_scale") return t;  // static: the same scale on every rank
    LOOM_THROW("tensor parallelism: '{}' is not supported{}", name, mlp ? " (MLP biases)" : "");
  }

  std::vector<std::string> names() const override { return full_.names(); }

 private:
  // This rank's slice of a linear layer's weight; none for other modules.
  std::optional<LayerSlice> layer_slice(std::string_view module) const {
    const int64_t hd = c_.head_dim, q_dim = c_.num_heads * hd;
    if (module == "attn_q") return LayerSlice{true, s_.heads_begin * hd, s_.num_heads * hd, q_dim};
    if (module == "attn_k" || module == "attn_v")
      return LayerSlice{true, s_.kv_heads_begin * hd, s_.num_kv_heads * hd, c_.num_kv_heads * hd};
    if (module == "ffn_gate" || module == "ffn_up")
      return LayerSlice{true, s_.inter_begin, s_.inter_size, c_.intermediate_size};
    if (module == "attn_output")
      return LayerSlice{false, s_.heads_begin * hd, s_.num_heads * hd, q_dim};
    if (module == "ffn_down")
      return LayerSlice{false, s_.inter_begin, s_.inter_size, c_.intermediate_size};
    return std::nullopt;
  }

  const WeightSource& full_;
  ModelConfig c_;
  TensorParallelShard s_;
};

}  // namespace

std::unique_ptr<WeightSource> shard_weights(const WeightSource& full, const ModelConfig& config,
                                            const TensorParallelShard& shard) {
  return std::make_unique<ShardedWeights>(full, config, shard);
}

}  // namespace loom
