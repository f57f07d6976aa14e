// loom bench: benchmark programs that print numbers (JSON, then a table).
//   workload  write the shared ShareGPT-like / fixed workload as JSONL (peers read it)
//   latency   single-stream prefill and decode speed, and aggregate decode
//             tokens/s at several batch sizes; --peer llama.cpp runs llama.cpp
//             on the same GGUF, prompt and threads in the same run
//   offline   N requests straight into the engine (no HTTP), all at once
//   serve     streamed requests to an OpenAI-compatible server (cmd_bench_serve.cpp)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "decode_window.h"
#include "driver.h"
#include "report.h"
#include "runtime.h"
#include "step_profile_report.h"
#include "tokenizer/tokenizer.h"
#include "workload.h"

namespace loom::cli {

namespace {

// Token ids prompts may use: the vocabulary minus special tokens.
std::vector<int32_t> allowed_ids(const ModelRuntime& rt) {
  std::vector<int32_t> ids;
  const int64_t vocab = rt.model.config.vocab_size;
  const Tokenizer* tok = rt.text.tokenizer.get();
  for (int64_t i = 0; i < vocab; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (tok && (id >= tok->vocab_size() || tok->is_special(id))) continue;
    ids.push_back(id);
  }
  return ids;
}

Request fixed_request(std::vector<int32_t> prompt, int32_t output_len) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = output_len;
  r.params.min_tokens = output_len;
  r.params.ignore_eos = true;
  return r;
}

nlohmann::json run_info(const RuntimeOptions& ro, const ModelRuntime& rt) {
  return {{"model", ro.model},
          {"device", rt.device_name},
          {"threads", ro.threads > 0 ? ro.threads : ThreadPool::default_threads()},
          {"kv_blocks", rt.engine->num_kv_blocks()},
          {"block_size", rt.engine->block_size()},
          {"kv_cache_dtype", dtype_name(rt.kv_dtype)},
          {"quantization", rt.model.config.quantization.describe()}};
}

// Speculative decoding over the stats' interval (after - before): drafts
// verified, accepted, the acceptance rate and the tokens a verify step gave.
nlohmann::json speculative_report(const EngineStats& before, const EngineStats& after) {
  const uint64_t drafted = after.spec_draft_tokens - before.spec_draft_tokens;
  const uint64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
  uint64_t steps = 0;
  for (size_t a = 0; a < after.spec_accepted_lengths.size(); ++a)
    steps += after.spec_accepted_lengths[a] -
             (a < before.spec_accepted_lengths.size() ? before.spec_accepted_lengths[a] : 0);
  return {{"draft_tokens", drafted},
          {"accepted_tokens", accepted},
          {"acceptance_rate", drafted ? double(accepted) / double(drafted) : 0.0},
          {"verify_steps", steps},
          {"mean_accepted_length", steps ? 1.0 + double(accepted) / double(steps) : 0.0}};
}

// GPU memory (the process's device footprint: weights, KV pool, workspaces),
// the KV pool's peak use in bytes, and how the engine chose tokens.
void add_device_report(const ModelRuntime& rt, const EngineStats& stats, nlohmann::json& report) {
  report["tokens_by_path"] = {{"argmax_on_device", stats.argmax_tokens},
                              {"sampled_on_device", stats.device_sampled_tokens},
                              {"generated", stats.generated_tokens}};
  report["steps"] = {{"total", stats.steps}, {"async", stats.async_steps}};
  report["speculative"] = speculative_report(EngineStats{}, stats);
  report["graphs"] = {{"replayed_steps", rt.transformer->graph_stats().replayed},
                      {"piecewise_steps", rt.transformer->graph_stats().piecewise},
                      {"recordings", rt.transformer->graph_stats().recorded},
                      {"eager_steps", rt.transformer->graph_stats().eager}};
  const int64_t used = device_memory_used(rt);
  if (used > 0) report["gpu_memory_used_bytes"] = used;
}

// The steady decode window of a batch run (bench/decode_window.h).
bench::DecodeWindow decode_window(const bench::RunResult& run) {
  std::vector<std::vector<double>> token_s;
  for (const auto& r : run.requests) token_s.push_back(r.token_s);
  return bench::steady_decode_window(token_s);
}

nlohmann::json run_llamacpp_peer(const std::string& model, int threads,
                                 const std::vector<int32_t>& prompt, int decode_tokens) {
  std::ostringstream ids;
  for (size_t i = 0; i < prompt.size(); ++i) ids << (i ? "," : "") << prompt[i];
  const std::string script =
      (std::filesystem::path(LOOM_SOURCE_DIR) / "bench/peers/llamacpp_latency.py").string();
  const std::string cmd = "python3 '" + script + "' --model '" + model + "' --threads " +
                          std::to_string(threads) + " --decode-tokens " +
                          std::to_string(decode_tokens) + " --prompt-ids " + ids.str() +
                          " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {{"engine", "llama.cpp"}, {"error", "cannot start python3"}};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return {{"engine", "llama.cpp"}, {"error", "no JSON from the peer script"}};
  return j;
}

int bench_workload(int argc, char** argv) {
  CLI::App app{"Write a benchmark workload as JSONL ({prompt_ids, output_len} per line)",
               "bench workload"};
  show_defaults(app);
  std::string model, output;
  bench::WorkloadSpec spec;
  app.add_option("--model", model, "model whose vocabulary prompts draw from")->required();
  app.add_option("--dataset", spec.dataset, "sharegpt or fixed");
  app.add_option("--num-requests", spec.num_requests, "requests");
  app.add_option("--input-len", spec.input_len, "fixed: prompt tokens");
  app.add_option("--output-len", spec.output_len, "fixed: output tokens");
  app.add_option("--seed", spec.seed, "workload seed");
  app.add_option("--output", output, "JSONL file to write")->required();
  LOOM_PARSE(app, argc, argv);
  return guarded("bench workload", [&] {
    RuntimeOptions ro;
    ro.model = model;
    auto loaded = open_model(model);
    std::vector<int32_t> ids;
    std::unique_ptr<Tokenizer> tok;
    if (loaded.gguf || std::filesystem::exists(std::filesystem::path(model) / "tokenizer.json"))
      tok = load_tokenizer_bundle(model, loaded.gguf).tokenizer;
    for (int64_t i = 0; i < loaded.config.vocab_size; ++i)
      if (!tok || (i < tok->vocab_size() && !tok->is_special(static_cast<int32_t>(i))))
        ids.push_back(static_cast<int32_t>(i));
    auto reqs = bench::make_workload(spec, ids);
    bench::write_workload_jsonl(reqs, output);
    std::fprintf(stderr, "wrote %zu requests to %s\n", reqs.size(), output.c_str());
    return 0;
  });
}

int bench_latency(int argc, char** argv) {
  CLI::App app{"Single-stream prefill and decode speed, and decode tokens/s by batch size",
               "bench latency"};
  show_defaults(app);
  RuntimeOptions ro;
  add_runtime_options(app, ro);
  int32_t input_len = 128, output_len = 64;
  std::vector<int32_t> batch_sizes = {1};
  std::string peer;
  bool json = false;
  uint64_t seed = 1;
  app.add_option("--input-len", input_len, "prompt tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-len", output_len, "generated tokens per request")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--batch-sizes", batch_sizes, "concurrent sequences to measure, e.g. 1,4,16,64")
      ->delimiter(',');
  app.add_option("--peer", peer, "also measure llama.cpp (CPU, GGUF) in this run")
      ->check(CLI::IsMember({"", "llama.cpp"}));
  app.add_option("--seed", seed, "prompt seed");
  app.add_flag("--json", json, "print only the JSON line");
  LOOM_PARSE(app, argc, argv);
  return guarded("bench latency", [&] {
    auto rt = build_runtime(ro);
    const auto ids = allowed_ids(*rt);
    bench::WorkloadSpec spec;
    spec.dataset = "fixed";
    spec.input_len = input_len;
    spec.output_len = output_len;
    spec.seed = seed;
    rt->engine->start();

    // Warm-up: one short request.
    spec.num_requests = 1;
    bench::run_all(*rt->engine, {fixed_request(bench::make_workload(spec, ids)[0].prompt_ids, 4)});

    nlohmann::json report = run_info(ro, *rt);
    report["input_len"] = input_len;
    report["output_len"] = output_len;
    // Prefill: time to first token of one prompt (best of 3).
    double best_ttft = 1e300;
    std::vector<int32_t> single_prompt;
    for (int rep = 0; rep < 3; ++rep) {
      spec.seed = seed + 100 + rep;
      auto prompt = bench::make_workload(spec, ids)[0].prompt_ids;
      if (rep == 0) single_prompt = prompt;
      auto run = bench::run_all(*rt->engine, {fixed_request(prompt, 2)});
      best_ttft = std::min(best_ttft, run.requests[0].token_s.front() - run.requests[0].submit_s);
    }
    report["prefill_tokens_per_s"] = std::round(input_len / best_ttft * 10) / 10;
    report["ttft_ms"] = std::round(best_ttft * 1e4) / 10;
    nlohmann::json by_batch = nlohmann::json::array();
    for (int32_t b : batch_sizes) {
      LOOM_CHECK(b >= 1 && b <= 65536, "batch size {} out of range", b);
      LOOM_CHECK(b <= ro.max_num_seqs,
                 "batch size {} is over --max-num-seqs {}: the batch would never run at once", b,
                 ro.max_num_seqs);
      spec.num_requests = b;
      spec.seed = seed + static_cast<uint64_t>(b);
      // Enough tokens each that output_len steps run with every request
      // decoding after the last prompt is prefilled.
      const int32_t generate = b == 1 ? output_len
                                      : bench::tokens_for_decode_window(b, input_len, output_len,
                                                                        ro.max_num_batched_tokens);
      std::vector<Request> reqs;
      for (auto& w : bench::make_workload(spec, ids))
        reqs.push_back(fixed_request(std::move(w.prompt_ids), generate));
      auto run = bench::run_all(*rt->engine, std::move(reqs));
      auto lat = bench::latency_report(run);
      const bench::DecodeWindow window = decode_window(run);
      by_batch.push_back({{"batch", b},
                          {"decode_tokens_per_s", std::round(window.tokens_per_s() * 10) / 10},
                          {"tokens_per_request", generate},
                          {"window",
                           {{"tokens", window.tokens},
                            {"seconds", std::round((window.end_s - window.start_s) * 1e4) / 1e4}}},
                          {"itl_ms", lat["itl_ms"]},
                          {"tpot_ms", lat["tpot_ms"]},
                          {"speculative", speculative_report(run.stats_before, run.stats_after)}});
    }
    report["decode"] = by_batch;
    if (!by_batch.empty())
      report["decode_tokens_per_s_batch1"] = by_batch[0]["decode_tokens_per_s"];
    report["peak_rss_mib"] = bench::peak_rss_bytes() >> 20;
    rt->engine->stop();
    if (peer == "llama.cpp") {
      const int threads = ro.threads > 0 ? ro.threads : ThreadPool::default_threads();
      auto p = run_llamacpp_peer(ro.model, threads, single_prompt, output_len);
      report["peer"] = p;
      if (p.contains("decode_tokens_per_s") && !by_batch.empty()) {
        const double loom_decode = by_batch[0]["decode_tokens_per_s"].get<double>();
        report["ratio_decode_loom_over_peer"] =
            std::round(loom_decode / p["decode_tokens_per_s"].get<double>() * 1000) / 1000;
        report["ratio_prefill_loom_over_peer"] =
            std::round(report["prefill_tokens_per_s"].get<double>() /
                       p["prefill_tokens_per_s"].get<double>() * 1000) /
            1000;
      }
    }
    bench::print_report(report, json);
    return 0;
  });
}

int bench_offline(int argc, char** argv) {
  CLI::App app{"Offline throughput: N requests submitted at once straight into the engine",
               "bench offline"};
  show_defaults(app);
  RuntimeOptions ro;
  add_runtime_options(app, ro);
  bench::WorkloadSpec spec;
  std::string workload_file;
  bool json = false;
  app.add_option("--dataset", spec.dataset, "sharegpt or fixed");
  app.add_option("--num-requests", spec.num_requests, "requests");
  app.add_option("--input-len", spec.input_len, "fixed: prompt tokens");
  app.add_option("--output-len", spec.output_len, "fixed: output tokens");
  app.add_option("--seed", spec.seed, "workload seed");
  app.add_option("--workload", workload_file, "read the workload from this JSONL instead");
  float temperature = 0.0f, top_p = 1.0f;
  int32_t top_k = 0;
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-p", top_p, "nucleus sampling")->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", top_k, "top-k sampling (0: off)")->check(CLI::Range(0, 1 << 20));
  bool stop_at_eos = false;
  app.add_flag(
      "--profile", ro.profile_steps,
      "report where the engine's steps spend their time (step_profile: host phases, device "
      "spans and gaps by kind of step)");
  app.add_flag("--stop-at-eos", stop_at_eos,
               "requests end at the model's end-of-sequence token (output_len is then a cap); "
               "default: exactly output_len tokens each");
  app.add_flag("--json", json, "print only the JSON line");
  LOOM_PARSE(app, argc, argv);
  return guarded("bench offline", [&] {
    auto rt = build_runtime(ro);
    auto work = workload_file.empty() ? bench::make_workload(spec, allowed_ids(*rt))
                                      : bench::read_workload_jsonl(workload_file);
    std::vector<Request> reqs;
    int64_t input_tokens = 0;
    for (auto& w : work) {
      input_tokens += static_cast<int64_t>(w.prompt_ids.size());
      reqs.push_back(fixed_request(std::move(w.prompt_ids), w.output_len));
      reqs.back().params.temperature = temperature;
      reqs.back().params.top_p = top_p;
      reqs.back().params.top_k = top_k;
      reqs.back().params.seed = static_cast<uint64_t>(reqs.size());
      if (stop_at_eos) {
        reqs.back().params.min_tokens = 0;
        reqs.back().params.ignore_eos = false;
      }
    }
    const size_t n = reqs.size();
    rt->engine->start();
    auto run = bench::run_all(*rt->engine, std::move(reqs));
    rt->engine->stop();
    const EngineStats stopped = rt->engine->stats();  // the last step's profile included
    int64_t output_tokens = 0, errors = 0;
    for (const auto& r : run.requests) {
      output_tokens += static_cast<int64_t>(r.token_s.size());
      errors += r.error;
    }
    const auto& a = run.stats_after;
    const auto& b = run.stats_before;
    nlohmann::json report = run_info(ro, *rt);
    report["dataset"] = workload_file.empty() ? spec.dataset : workload_file;
    report["num_requests"] = n;
    report["errors"] = errors;
    report["duration_s"] = std::round(run.duration_s * 1000) / 1000;
    report["requests_per_s"] = std::round(double(n) / run.duration_s * 1000) / 1000;
    report["input_tokens"] = input_tokens;
    report["output_tokens"] = output_tokens;
    report["input_tokens_per_s"] = std::round(double(input_tokens) / run.duration_s * 10) / 10;
    report["output_tokens_per_s"] = std::round(double(output_tokens) / run.duration_s * 10) / 10;
    report.update(bench::latency_report(run));
    report["peak_rss_mib"] = bench::peak_rss_bytes() >> 20;
    if (temperature > 0)
      report["sampling"] = {{"temperature", temperature}, {"top_p", top_p}, {"top_k", top_k}};
    add_device_report(*rt, a, report);
    // Exact, from the engine's step ends: the step holding the most blocks
    // (tokens stored in them, and the share of their slots holding none),
    // and the waste over every step, weighted by slots held; max_waste_sampled
    // is the largest waste of the 20 ms samples (early, small pools included).
    const KvUsageHistory& h = stopped.kv_history;
    const uint64_t slot_steps = h.allocated_slot_steps - b.kv_history.allocated_slot_steps;
    const uint64_t filled_steps = h.filled_slot_steps - b.kv_history.filled_slot_steps;
    report["kv"] = {
        {"peak_used_blocks", h.peak_used_blocks},
        {"peak_usage", double(h.peak_used_blocks) / std::max(1, a.kv.num_blocks)},
        {"peak_tokens_stored", h.peak_filled_slots},
        {"peak_slots", h.peak_allocated_slots},
        {"peak_waste", h.peak_waste()},
        {"mean_waste", slot_steps ? double(slot_steps - filled_steps) / double(slot_steps) : 0.0},
        {"max_waste_sampled", run.peak_kv_waste},
        {"prefix_hit_rate", a.kv.prefix_hit_rate()},
        {"preemptions", a.preemptions - b.preemptions}};
    if (ro.profile_steps)
      report["step_profile"] =
          bench::step_profile_report(stopped.profile - b.profile, run.duration_s);
    bench::print_report(report, json);
    return 0;
  });
}

}  // namespace

namespace {

struct Benchmark {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

constexpr Benchmark kBenchmarks[] = {
    {"latency", bench_latency,
     "single-stream prefill/decode speed and decode tokens/s by batch size"},
    {"offline", bench_offline, "N requests straight into the engine (no HTTP), all at once"},
    {"serve", cmd_bench_serve,
     "streamed requests to an OpenAI-compatible server (loom serve, vLLM...)"},
    {"workload", bench_workload, "write a benchmark workload as JSONL (peers read the same one)"},
};

void bench_usage(FILE* out) {
  std::fprintf(
      out,
      "usage: loom bench <benchmark> [flags]   (loom bench <benchmark> --help for its flags)\n\n");
  for (const auto& b : kBenchmarks) std::fprintf(out, "  %-9s %s\n", b.name, b.help);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc < 2) {
    bench_usage(stderr);
    return 2;
  }
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h") {
    bench_usage(stdout);
    return 0;
  }
  for (const auto& b : kBenchmarks)
    if (sub == b.name) return b.run(argc - 1, argv + 1);
  std::fprintf(stderr, "loom bench: unknown benchmark '%s'\n\n", sub.c_str());
  bench_usage(stderr);
  return 2;
}

}  // namespace loom::cli
