// Timing of the streamed chunk bodies the server writes per token (not a
// correctness test; disabled by default): ResponseBuilder::on_event over
// 2,000 streaming requests x 32 tokens of plain text, completions and chat,
// microseconds an event. At thousands of requests a second the engine's
// delivery thread formats one such chunk per sequence per step.
// Run: build/<preset>/tests/test_perf_stream_chunks --gtest_also_run_disabled_tests
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "server/response_builder.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {
namespace {

TEST(Perf, DISABLED_StreamChunks) {
  static const auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  for (Endpoint ep : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    GenerationRequest r;
    r.endpoint = ep;
    r.model = "qwen05";
    r.prompts = {{1, 2, 3}};
    r.prompt_texts = {"p"};
    r.stream = true;
    constexpr int kRequests = 2000, kTokens = 32;
    std::vector<std::unique_ptr<ResponseBuilder>> builders;
    for (int i = 0; i < kRequests; ++i)
      builders.push_back(
          std::make_unique<ResponseBuilder>(r, *tok, "cmpl-" + std::to_string(i), 1));
    size_t bytes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < kTokens; ++t)
      for (int i = 0; i < kRequests; ++i) {
        StreamEvent e;
        e.seq_index = 0;
        e.token_ids = {100 + t};
        e.text = " word";
        if (t + 1 == kTokens) {
          e.finish = FinishReason::Length;
          e.request_done = true;
        }
        for (const std::string& c : builders[size_t(i)]->on_event(0, e)) bytes += c.size();
      }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-12s %.2f us an event (%zu bytes of chunks)\n",
                ep == Endpoint::Completions ? "completions" : "chat", us / (kRequests * kTokens),
                bytes);
  }
}

}  // namespace
}  // namespace loom::server
