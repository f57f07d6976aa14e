// The steady-state decode window of a batch (`loom bench latency`): the
// interval in which every request of the batch is decoding, from the moment
// the last request got its first token to the moment the first request got
// its last one, and the token rate inside it. Long prompts are prefilled in
// chunks over many steps while the requests already prefilled decode, so the
// requests must generate enough tokens for the window to exist at all:
// tokens_for_decode_window says how many.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::bench {

struct DecodeWindow {
  double start_s = 0;  // the last first token (seconds since the run began)
  double end_s = 0;    // the first last token
  int64_t tokens = 0;  // tokens that arrived in (start_s, end_s]
  double tokens_per_s() const { return end_s > start_s ? double(tokens) / (end_s - start_s) : 0.0; }
};

// Of requests' token arrival times (token_s[r]: request r's tokens, in
// order). An empty window (start_s >= end_s, rate 0) when a request has fewer
// than two tokens or one finished before another started.
DecodeWindow steady_decode_window(const std::vector<std::vector<double>>& token_s);

// Tokens each of `batch` requests of input_len prompt tokens must generate so
// that at least decode_steps steps run with every request decoding, when a
// step computes at most step_tokens tokens (the scheduler's
// max_num_batched_tokens; each running request's decode takes one of them,
// prefill chunks the rest). An upper bound on the steps spent before the last
// request's first token, plus decode_steps.
int32_t tokens_for_decode_window(int32_t batch, int32_t input_len, int32_t decode_steps,
                                 int32_t step_tokens);

}  // namespace loom::bench
