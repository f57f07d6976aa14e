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

class ShardedWeights final : public WeightSource {
 public:
  ShardedWeights(const WeightSource& full, const ModelConfig& c, const TensorParallelShard& s)
      : full_(full), c_(c), s_(s) {}

  std::optional<Tensor> find(const std::string& name) const override {
    std::optional<Tensor> t = full_.find(name);
    if (!t) return t;
    const int64_t hd = c_.head_dim;
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
    const std::string_view part = std::string_view(name).substr(dot + 1);
    const bool bias = part.ends_with(".bias");
    auto rows = [&](int64_t begin, int64_t count) {
      return bias ? slice_vector(*t, name, begin, count) : slice_rows(*t, name, begin, count);
    };
    if (part.starts_with("attn_q.")) return rows(s_.heads_begin * hd, s_.num_heads * hd);
    if (part.starts_with("attn_k.") || part.starts_with("attn_v."))
      return rows(s_.kv_heads_begin * hd, s_.num_kv_heads * hd);
    if (part == "attn_output.weight")
      return slice_cols(*t, name, s_.heads_begin * hd, s_.num_heads * hd);
    // Added once to the sum of the ranks' partial outputs.
    if (part == "attn_output.bias") return s_.rank == 0 ? t : std::nullopt;
    if (part == "ffn_gate.weight" || part == "ffn_up.weight")
      return rows(s_.inter_begin, s_.inter_size);
    if (part == "ffn_down.weight") return slice_cols(*t, name, s_.inter_begin, s_.inter_size);
    if (part.starts_with("ffn_gate.") || part.starts_with("ffn_up.") ||
        part.starts_with("ffn_down."))
      LOOM_THROW("tensor parallelism: '{}' is not supported (MLP biases)", name);
    return t;  // norms: replicated
  }

  std::vector<std::string> names() const override { return full_.names(); }

 private:
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
