// quantization_config parsing (quantization.h). Every key that changes what a
// checkpoint means is checked; a scheme loom cannot run is an error that
// names it. Keys that only record how the checkpoint was made (observer,
// compression ratio, ignore lists: the tensors' dtypes say which layers are
// FP8) are accepted; any other key is logged once and ignored.
#include "model/quantization.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "model/config_json.h"

namespace loom {
namespace {

constexpr int64_t kBlock = 128;

void warn_unknown_keys(const ConfigJson& c, const std::set<std::string>& known) {
  for (const auto& [key, value] : c.json().items())
    if (!known.count(key) && !value.is_null())
      LOOM_LOG_WARN("{}: ignoring unknown key '{}'", c.context(), key);
}

// A compressed-tensors quantisation args object must describe symmetric
// 8-bit floats (E4M3).
void check_fp8_args(const ConfigJson& a) {
  const int64_t bits = a.integer("num_bits", 8, 1, 64);
  const std::string type = a.string("type", "int");
  const std::string strategy = a.string("strategy", "tensor");
  if (bits != 8 || type != "float")
    LOOM_THROW(
        "{}: {}-bit {} quantisation (strategy {}) is not supported: loom runs FP8 (8-bit float) "
        "checkpoints only",
        a.context(), bits, type, strategy);
  if (!a.boolean("symmetric", true)) a.fail("symmetric", "must be true (FP8 scales are symmetric)");
  if (a.has("actorder")) a.fail("actorder", "is not supported");
}

std::pair<int64_t, int64_t> block_shape(const ConfigJson& c, const char* key) {
  const nlohmann::json* v = c.find(key);
  if (!v || !v->is_array() || v->size() != 2 || !(*v)[0].is_number_integer() ||
      !(*v)[1].is_number_integer())
    c.fail(key, "must be a list of two integers");
  const int64_t n = (*v)[0].get<int64_t>(), k = (*v)[1].get<int64_t>();
  if (n != kBlock || k != kBlock)
    c.fail(key, fmt::format("must be [{0}, {0}]: other FP8 block sizes are not supported", kBlock));
  return {n, k};
}

QuantizationConfig from_hf_fp8(const ConfigJson& q) {
  warn_unknown_keys(q, {"quant_method", "activation_scheme", "weight_block_size", "fmt",
                        "modules_to_not_convert", "ignored_layers", "dequantize"});
  QuantizationConfig c;
  c.fp8 = true;
  c.source = "fp8";
  const std::string fmt = q.string("fmt", "e4m3");
  if (fmt != "e4m3") q.fail("fmt", "must be \"e4m3\" (loom runs FP8 E4M3 weights)");
  if (q.boolean("dequantize", false))
    q.fail("dequantize",
           "= true asks for a dequantised model: convert the checkpoint to bf16 instead");
  const std::string scheme = q.string("activation_scheme", "dynamic");
  if (scheme != "dynamic" && scheme != "static")
    q.fail("activation_scheme", "must be \"dynamic\" or \"static\"");
  if (q.has("weight_block_size")) {
    std::tie(c.block_n, c.block_k) = block_shape(q, "weight_block_size");
    c.weight_scale = Fp8WeightScale::Block;
    if (scheme == "static")
      q.fail("activation_scheme",
             "must be \"dynamic\" with block-wise weight scales (weight_block_size)");
    c.activation = Fp8Activation::DynamicGroup;
  } else {
    c.weight_scale = Fp8WeightScale::Tensor;
    c.activation = scheme == "static" ? Fp8Activation::Static : Fp8Activation::DynamicToken;
  }
  return c;
}

// One config group's weights and input activations.
QuantizationConfig from_ct_group(const ConfigJson& g) {
  warn_unknown_keys(g, {"targets", "weights", "input_activations", "output_activations", "format"});
  QuantizationConfig c;
  c.fp8 = true;
  c.source = "compressed-tensors";
  const std::string format = g.string("format", "float-quantized");
  if (format != "float-quantized" && format != "naive-quantized")
    g.fail("format", "is not supported (FP8 checkpoints are \"float-quantized\")");
  if (g.has("output_activations")) g.fail("output_activations", "is not supported");

  const std::optional<ConfigJson> w = g.object("weights");
  if (!w) g.fail("weights", "is required");
  check_fp8_args(*w);
  if (w->boolean("dynamic", false)) w->fail("dynamic", "must be false for weights");
  const std::string ws = w->string("strategy", "tensor");
  if (ws == "tensor") {
    c.weight_scale = Fp8WeightScale::Tensor;
  } else if (ws == "channel") {
    c.weight_scale = Fp8WeightScale::Channel;
  } else if (ws == "block") {
    c.weight_scale = Fp8WeightScale::Block;
    std::tie(c.block_n, c.block_k) = block_shape(*w, "block_structure");
  } else {
    w->fail("strategy", "is not a supported FP8 weight strategy (tensor, channel, block)");
  }

  const std::optional<ConfigJson> a = g.object("input_activations");
  if (!a)
    LOOM_THROW(
        "{}: FP8 weights without input_activations (weight-only FP8) are not supported: loom runs "
        "W8A8 (FP8_DYNAMIC or FP8 schemes)",
        g.context());
  check_fp8_args(*a);
  const bool dynamic = a->boolean("dynamic", false);
  const std::string as = a->string("strategy", "tensor");
  if (!dynamic) {
    if (as != "tensor") a->fail("strategy", "must be \"tensor\" for static activation scales");
    c.activation = Fp8Activation::Static;
  } else if (as == "token" || as == "tensor") {
    c.activation =
        Fp8Activation::DynamicToken;  // per tensor at run time: loom uses per token (finer)
  } else if (as == "group") {
    if (a->integer("group_size", 0, 0, int64_t{1} << 20) != kBlock)
      a->fail("group_size", fmt::format("must be {} for dynamic group activations", kBlock));
    c.activation = Fp8Activation::DynamicGroup;
  } else {
    a->fail("strategy", "is not a supported FP8 activation strategy (token, tensor, group)");
  }
  if (c.weight_scale == Fp8WeightScale::Block) {
    if (c.activation != Fp8Activation::DynamicGroup)
      a->fail("strategy", "must be dynamic \"group\" (group_size 128) with block-wise weights");
  } else if (c.activation == Fp8Activation::DynamicGroup) {
    a->fail("strategy", "\"group\" needs block-wise weights (strategy \"block\")");
  }
  return c;
}

bool same_scheme(const QuantizationConfig& a, const QuantizationConfig& b) {
  return a.weight_scale == b.weight_scale && a.activation == b.activation &&
         a.block_n == b.block_n && a.block_k == b.block_k;
}

QuantizationConfig from_compressed_tensors(const ConfigJson& q) {
  warn_unknown_keys(q, {"quant_method", "config_groups", "format", "ignore", "kv_cache_scheme",
                        "quantization_status", "global_compression_ratio", "version",
                        "sparsity_config", "transform_config", "provider"});
  const std::string format = q.string("format", "float-quantized");
  if (format != "float-quantized" && format != "naive-quantized")
    q.fail("format", "is not supported (FP8 checkpoints are \"float-quantized\")");
  if (q.has("sparsity_config")) q.fail("sparsity_config", "is not supported");
  if (q.has("transform_config")) q.fail("transform_config", "is not supported");
  const std::optional<ConfigJson> groups = q.object("config_groups");
  if (!groups || groups->json().empty()) q.fail("config_groups", "must name at least one group");
  std::optional<QuantizationConfig> c;
  for (const auto& [name, group] : groups->json().items()) {
    if (!group.is_object()) groups->fail(name, "must be an object");
    const QuantizationConfig g =
        from_ct_group(ConfigJson(group, fmt::format("{} '{}'", groups->context(), name)));
    if (c && !same_scheme(*c, g))
      LOOM_THROW("{}: groups use different FP8 schemes ({} and {}); loom runs one scheme per model",
                 groups->context(), c->describe(), g.describe());
    c = g;
  }
  if (const std::optional<ConfigJson> kv = q.object("kv_cache_scheme")) {
    check_fp8_args(*kv);
    if (kv->boolean("dynamic", false))
      kv->fail("dynamic", "must be false (static KV cache scales)");
    const std::string s = kv->string("strategy", "tensor");
    if (s != "tensor" && s != "attn_head")
      kv->fail("strategy", "is not supported for the KV cache (tensor, attn_head)");
    c->kv_cache_scales = true;
  }
  return *c;
}

const char* weight_scale_name(Fp8WeightScale s) {
  switch (s) {
    case Fp8WeightScale::Tensor:
      return "per-tensor";
    case Fp8WeightScale::Channel:
      return "per-channel";
    case Fp8WeightScale::Block:
      return "128x128 block";
  }
  return "?";
}

const char* activation_name(Fp8Activation a) {
  switch (a) {
    case Fp8Activation::DynamicToken:
      return "dynamic per-token";
    case Fp8Activation::DynamicGroup:
      return "dynamic per-token 1x128-group";
    case Fp8Activation::Static:
      return "static per-tensor";
  }
  return "?";
}

}  // namespace

std::string QuantizationConfig::describe() const {
  if (!fp8) return "none";
  return fmt::format("fp8 e4m3 ({}): {} weight scales, {} activations{}", source,
                     weight_scale_name(weight_scale), activation_name(activation),
                     kv_cache_scales ? ", KV cache scales" : "");
}

QuantizationConfig quantization_from_hf(const nlohmann::json& cfg) {
  const ConfigJson root(cfg, "config.json");
  const std::optional<ConfigJson> q = root.object("quantization_config");
  if (!q) return {};
  const std::string method = q->string("quant_method", "");
  if (method == "fp8") return from_hf_fp8(*q);
  if (method == "compressed-tensors") return from_compressed_tensors(*q);
  if (method.empty()) q->fail("quant_method", "is required");
  LOOM_THROW(
      "{}: quant_method '{}' is not supported: loom runs FP8 checkpoints (quant_method \"fp8\", or "
      "\"compressed-tensors\" with FP8 / FP8_DYNAMIC schemes)",
      q->context(), method);
}

QuantizationConfig online_fp8_quantization() {
  QuantizationConfig c;
  c.fp8 = true;
  c.source = "online";
  c.weight_scale = Fp8WeightScale::Channel;
  c.activation = Fp8Activation::DynamicToken;
  c.quantize_at_load = true;
  return c;
}

}  // namespace loom
