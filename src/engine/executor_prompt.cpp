// StepExecutor: scoring prompt positions (params.prompt_logprobs). The rows
// are copied to the host and each gets a log-softmax: the logprob and rank of
// the prompt's next token, and the best alternatives. Cost: one vocabulary
// row per scored position, so a prefill chunk of N such positions holds N
// rows of logits for the step.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/executor_impl.h"

namespace loom {

std::vector<PromptScores> StepExecutor::Impl::score_prompt(const std::vector<PromptRows>& prompt,
                                                           const Scheduler& seqs,
                                                           const Tensor& logits) {
  const int64_t vocab = logits.dim(1);
  std::vector<float> host;
  copy_to_host_f32(model.backend(), logits, host);
  std::vector<PromptScores> out;
  std::vector<int32_t> order;
  size_t row = 0;
  for (const PromptRows& p : prompt) {
    const Sequence& s = seqs.get(p.seq);
    const int32_t top = *s.params().prompt_logprobs;
    PromptScores ps;
    ps.seq = p.seq;
    ps.first_token = p.first_token;
    for (int32_t i = 0; i < p.count; ++i, ++row) {
      LOOM_CHECK(int64_t(row) < logits.dim(0), "prompt row {} of {}", row, logits.dim(0));
      const float* x = host.data() + row * size_t(vocab);
      const int32_t next = s.tokens[size_t(p.first_token + i)];
      float max = x[0];
      for (int64_t v = 1; v < vocab; ++v) max = std::max(max, x[v]);
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(x[v] - max));
      const float log_z = max + float(std::log(sum));
      SampleResult r;
      r.token = next;
      r.logprob = x[next] - log_z;
      r.rank = 1;
      for (int64_t v = 0; v < vocab; ++v) r.rank += x[v] > x[next];
      if (top > 0) {
        order.resize(size_t(vocab));
        for (int64_t v = 0; v < vocab; ++v) order[size_t(v)] = int32_t(v);
        std::partial_sort(
            order.begin(), order.begin() + top, order.end(),
            [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
        for (int32_t k = 0; k < top; ++k)
          r.top.push_back({order[size_t(k)], x[order[size_t(k)]] - log_z});
      }
      ps.scores.push_back(std::move(r));
    }
    out.push_back(std::move(ps));
  }
  return out;
}

}  // namespace loom
