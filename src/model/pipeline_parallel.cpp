// PipelineParallel (pipeline_parallel.h).
#include "model/pipeline_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "dist/communicator.h"

namespace loom {

namespace {

// `buffer` with room for at least `rows` rows of `cols` (grown geometrically).
Tensor rows_of(Backend& be, Tensor& buffer, int64_t rows, int64_t cols) {
  if (buffer.data() == nullptr || buffer.dim(0) < rows || buffer.dim(1) != cols) {
    const int64_t cap =
        buffer.data() && buffer.dim(1) == cols ? std::max(rows, 2 * buffer.dim(0)) : rows;
    buffer = be.alloc(be.activation_dtype(), {cap, cols});
  }
  return buffer.slice_rows(0, rows);
}

}  // namespace

PipelineStage stage_layers(int64_t num_layers, int stage, int stages) {
  if (stages < 1 || stage < 0 || stage >= stages)
    LOOM_THROW("pipeline parallelism: stage {} is outside {} stages", stage, stages);
  if (stages > num_layers)
    LOOM_THROW("--pipeline-parallel-size {} is larger than the model's {} layers", stages,
               num_layers);
  PipelineStage s;
  s.first_layer = num_layers * stage / stages;
  s.last_layer = num_layers * (stage + 1) / stages;
  return s;
}

ModelConfig stage_config(const ModelConfig& config, int64_t first, int64_t last) {
  LOOM_CHECK(0 <= first && first < last && last <= config.num_layers,
             "layers [{}, {}) of a model of {}", first, last, config.num_layers);
  ModelConfig c = config;
  c.num_layers = last - first;
  if (!c.layer_is_sliding.empty())
    c.layer_is_sliding.assign(config.layer_is_sliding.begin() + first,
                              config.layer_is_sliding.begin() + last);
  return c;
}

std::vector<MicroBatch> split_step(const StepInput& step, int parts) {
  const AttentionMetadata& m = step.attn;
  const int32_t num_seqs = m.num_seqs;
  const int32_t total = m.query_start[size_t(num_seqs)];
  parts = std::clamp(parts, 1, std::max(num_seqs, 1));
  // Sequence boundaries: micro-batch k ends at the first sequence end at or
  // past k + 1 parts of the tokens, or earlier when the sequences left are
  // only enough for one each; a micro-batch without tokens is dropped.
  std::vector<int32_t> cuts = {0};
  for (int32_t s = 1; s < num_seqs; ++s) {
    const auto made = int32_t(cuts.size());
    if (made >= parts) break;
    const int64_t target = int64_t{total} * made / parts;
    const bool forced = num_seqs - s <= parts - made;
    if ((m.query_start[size_t(s)] >= target || forced) &&
        m.query_start[size_t(s)] > m.query_start[size_t(cuts.back())])
      cuts.push_back(s);
  }
  cuts.push_back(num_seqs);
  std::vector<MicroBatch> out;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int32_t s0 = cuts[k], s1 = cuts[k + 1];
    const int32_t t0 = m.query_start[size_t(s0)], t1 = m.query_start[size_t(s1)];
    if (t1 == t0) continue;  // only sequences without new tokens
    MicroBatch mb;
    StepInput& p = mb.step;
    p.tokens.assign(step.tokens.begin() + t0, step.tokens.begin() + t1);
    p.positions.assign(step.positions.begin() + t0, step.positions.begin() + t1);
    AttentionMetadata& pm = p.attn;
    pm.num_seqs = s1 - s0;
    pm.max_blocks_per_seq = m.max_blocks_per_seq;
    pm.max_context_bound = m.max_context_bound;
    for (int32_t s = s0; s <= s1; ++s) pm.query_start.push_back(m.query_start[size_t(s)] - t0);
    pm.context_lens.assign(m.context_lens.begin() + s0, m.context_lens.begin() + s1);
    const auto width = size_t(m.max_blocks_per_seq);
    pm.block_tables.assign(m.block_tables.begin() + ptrdiff_t(size_t(s0) * width),
                           m.block_tables.begin() + ptrdiff_t(size_t(s1) * width));
    pm.slot_mapping.assign(m.slot_mapping.begin() + t0, m.slot_mapping.begin() + t1);
    for (size_t j = 0; j < step.logit_rows.size(); ++j) {
      const int32_t r = step.logit_rows[j];
      if (r >= t0 && r < t1) {
        p.logit_rows.push_back(r - t0);
        mb.outputs.push_back(int32_t(j));
      }
    }
    if (p.logit_rows.empty()) {  // a forward step needs a logit row
      p.logit_rows.push_back(t1 - t0 - 1);
      mb.outputs.push_back(-1);
    }
    out.push_back(std::move(mb));
  }
  return out;
}

PipelineParallel::PipelineParallel(Communicator& world, PipelineLayout layout, int64_t num_layers)
    : world_(world), layout_(layout), num_layers_(num_layers) {
  if (layout_.stages < 1 || layout_.tp_size < 1 || layout_.micro_batches < 0)
    LOOM_THROW("pipeline layout of {} stages x {} ranks, {} micro-batches", layout_.stages,
               layout_.tp_size, layout_.micro_batches);
  if (world.size() != layout_.stages * layout_.tp_size)
    LOOM_THROW("{} pipeline stages x {} tensor-parallel ranks need {} ranks, the group has {}",
               layout_.stages, layout_.tp_size, layout_.stages * layout_.tp_size, world.size());
  if (layout_.micro_batches == 0) layout_.micro_batches = layout_.stages;
  stage_ = layout_.stage_of(world.rank());
  tp_rank_ = layout_.tp_rank_of(world.rank());
  stage_layers(num_layers_, stage_, layout_.stages);  // throws when P > L
}

PipelineStage PipelineParallel::stage() const {
  PipelineStage s = stage_layers(num_layers_, stage_, layout_.stages);
  s.link = const_cast<PipelineParallel*>(this);
  return s;
}

int64_t PipelineParallel::max_stage_layers() const {
  int64_t most = 0;
  for (int s = 0; s < layout_.stages; ++s) {
    const PipelineStage st = stage_layers(num_layers_, s, layout_.stages);
    most = std::max(most, st.last_layer - st.first_layer);
  }
  return most;
}

void PipelineParallel::receive_hidden(Tensor& x) {
  LOOM_CHECK(stage_ > 0, "the first stage receives no hidden states");
  world_.recv(x, layout_.rank_of(stage_ - 1, tp_rank_));
}

void PipelineParallel::send_hidden(const Tensor& x) {
  LOOM_CHECK(!last_stage(), "the last stage sends logits, not hidden states");
  world_.send(x, layout_.rank_of(stage_ + 1, tp_rank_));
}

Tensor PipelineParallel::forward(Transformer& model, const StepInput& step, KvCache& cache) {
  const auto num_tokens = int64_t(step.tokens.size());
  if (num_tokens == 0) LOOM_THROW("forward step has no tokens");
  if (int64_t(step.positions.size()) != num_tokens ||
      int64_t(step.attn.slot_mapping.size()) != num_tokens)
    LOOM_THROW("forward step has {} tokens, {} positions and {} KV slots", num_tokens,
               step.positions.size(), step.attn.slot_mapping.size());
  check_attention_metadata(step.attn, num_tokens, cache.block_size, cache.num_blocks);
  const std::vector<MicroBatch> batches = split_step(step, layout_.micro_batches);
  for (const MicroBatch& mb : batches) model.check_step(mb.step, cache);

  Backend& be = model.backend();
  const int64_t vocab = model.config().vocab_size;
  const auto rows = int64_t(step.logit_rows.size());
  const int last_rank = layout_.rank_of(layout_.stages - 1, 0);
  if (!last_stage()) {
    for (const MicroBatch& mb : batches) model.forward(mb.step, cache);  // sends its hidden states
    if (world_.rank() != 0) return Tensor();
    Tensor logits = rows_of(be, logits_, rows, vocab);
    world_.recv(logits, last_rank);
    return logits;
  }
  // Last stage: keep each micro-batch's logits, then put them in step order.
  int64_t collected_rows = 0;
  for (const MicroBatch& mb : batches) collected_rows += int64_t(mb.outputs.size());
  Tensor collected = rows_of(be, collected_, collected_rows, vocab);
  order_.assign(size_t(rows), -1);
  int64_t at = 0;
  for (const MicroBatch& mb : batches) {
    const Tensor part = model.forward(mb.step, cache);
    Tensor dst = collected.slice_rows(at, part.dim(0));
    be.copy(dst, part);
    for (size_t i = 0; i < mb.outputs.size(); ++i)
      if (mb.outputs[i] >= 0) order_[size_t(mb.outputs[i])] = int32_t(at + int64_t(i));
    at += part.dim(0);
  }
  if (tp_rank_ != 0) return Tensor();
  bool in_order = collected_rows == rows;
  for (int64_t j = 0; j < rows && in_order; ++j) in_order = order_[size_t(j)] == j;
  if (in_order) {
    world_.send(collected, 0);
  } else {
    Tensor logits = rows_of(be, logits_, rows, vocab);
    be.gather_rows(collected, order_, logits);
    world_.send(logits, 0);
  }
  return Tensor();
}

}  // namespace loom
