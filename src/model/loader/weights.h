// WeightSource: where a model's tensors come from (a GGUF file or an HF
// directory of safetensors), under one naming scheme: GGUF's canonical names
// ("token_embd.weight", "blk.3.attn_q.weight", "output_norm.weight"...).
// HF names are mapped to these by the HF loader, so architecture code asks for
// one set of names whatever the file format.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor of that canonical name as stored (CPU memory, possibly mmapped,
  // possibly quantised), or nullopt when the model has none.
  virtual std::optional<Tensor> find(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;

  // find() that throws loom::Error naming the missing tensor and the model.
  Tensor get(const std::string& name) const;
  // get() that also checks the shape (outermost first).
  Tensor get(const std::string& name, const std::vector<int64_t>& shape) const;
};

class GgufFile;

// Tensors of a GGUF file, under their own (canonical) names.
std::unique_ptr<WeightSource> open_gguf_weights(std::shared_ptr<const GgufFile> file);

// Tensors of an HF model directory: model.safetensors, or the shards listed
// by model.safetensors.index.json, with HF names mapped to canonical names
// (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight, ...).
std::unique_ptr<WeightSource> open_hf_weights(const std::string& model_dir);

}  // namespace loom
