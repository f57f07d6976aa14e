// loom bench serve: the serving benchmark's command line (flags, workload
// set-up, warm-up, one run or a sweep of request rates, JSON + Markdown
// report, a plot of a sweep drawn from its JSON). See bench/README.md.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "core/open_files.h"
#include "net/http_client.h"
#include "net/prometheus_text.h"
#include "net/url.h"
#include "report.h"
#include "serve_client.h"
#include "serve_profile.h"
#include "serve_structured.h"
#include "soak.h"

namespace loom::cli {

using namespace loom::bench;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double parse_rate(const std::string& s) {
  if (s == "inf" || s == "Inf" || s == "INF") return kInf;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(v > 0)) LOOM_THROW("bad request rate '{}' (a number > 0 or inf)", s);
  return v;
}

std::string shell_line(const char* cmd) {
  std::string out;
  if (FILE* p = popen(cmd, "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

nlohmann::json machine_info() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::ifstream in("/proc/cpuinfo");
  std::string line, cpu;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string dir = LOOM_SOURCE_DIR;
  // A source tree without .git (an exported copy) names its commit in .commit.
  std::string commit;
  if (std::ifstream f(dir + "/.commit"); f) std::getline(f, commit);
  if (commit.empty())
    commit = shell_line(("git -C '" + dir + "' rev-parse --short HEAD 2>/dev/null").c_str());
  return {{"hostname", host},
          {"cpu", cpu},
          {"cores", std::thread::hardware_concurrency()},
          {"date", date},
          {"commit", commit}};
}

std::string rate_name(double r) {
  if (std::isinf(r)) return "inf";
  std::ostringstream s;
  s << r;
  return s.str();
}

// Draws the sweep's plot from its JSON report with bench/plot_sweep.py
// (matplotlib, or gnuplot when matplotlib is missing). A missing plotter is
// a warning naming the command to run later, not a failed benchmark.
void plot_sweep(const std::string& json_path, const std::string& png_path) {
  const std::string script = std::string(LOOM_SOURCE_DIR) + "/bench/plot_sweep.py";
  const std::string cmd = "python3 '" + script + "' '" + json_path + "' '" + png_path + "'";
  if (std::system(cmd.c_str()) == 0)
    std::fprintf(stderr, "plot: %s\n", png_path.c_str());
  else
    std::fprintf(stderr, "plot: not drawn (needs matplotlib or gnuplot); run later: %s\n",
                 cmd.c_str());
}

// "rate 4: 37/100 requests" rewritten in place on a terminal; nothing in logs.
std::function<void(size_t, size_t)> progress_line(const std::string& rate) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  return [rate](size_t done, size_t total) {
    std::fprintf(stderr, "\rrate %s: %zu/%zu requests%s", rate.c_str(), done, total,
                 done == total ? "\n" : "");
  };
}

void print_sweep_table(const std::vector<double>& rates,
                       const std::vector<nlohmann::json>& reports) {
  std::printf(
      "\n| rate (req/s) | req/s | out tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p99 "
      "| E2E p99 | goodput | errors |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t i = 0; i < rates.size(); ++i) {
    const auto& r = reports[i];
    std::printf("| %s | %.3f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f | %.3f | %lld |\n",
                rate_name(rates[i]).c_str(), r["requests_per_s"].get<double>(),
                r["output_tokens_per_s"].get<double>(), r["ttft_ms"]["p50"].get<double>(),
                r["ttft_ms"]["p99"].get<double>(), r["tpot_ms"]["p50"].get<double>(),
                r["tpot_ms"]["p99"].get<double>(), r["itl_ms"]["p99"].get<double>(),
                r["e2e_ms"]["p99"].get<double>(), r["goodput"]["requests_per_s"].get<double>(),
                static_cast<long long>(r["errors"].get<int64_t>()));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) LOOM_THROW("cannot read {}", path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) LOOM_THROW("{}: not a JSON object", path);
  return j;
}

PromHistogram scrape_mask_time(const std::string& base_url) {
  auto r = net::http_request(net::parse_url(base_url), "GET", "/metrics", "", 10);
  if (r.status != 200) return {};
  return read_histogram(net::parse_prometheus(r.body), "loom_grammar_mask_seconds");
}

// Time to first token of `probes` requests sent one at a time: unconstrained,
// under `schema` already compiled (warm cache) and under a schema of its own
// per request (cold: each compiles). The added TTFT is against the first.
nlohmann::json compile_ttft(const ServeRunOptions& run, const ServeWorkloadSpec& spec,
                            const std::vector<int32_t>& ids, const nlohmann::json& schema,
                            int64_t probes) {
  ServeWorkloadSpec w = spec;
  w.dataset = "fixed";
  w.num_requests = probes;
  w.output_len = 4;
  nlohmann::json out;
  const uint64_t nonce = std::random_device{}();
  const char* kinds[] = {"unconstrained", "warm", "cold"};
  for (int k = 0; k < 3; ++k) {
    w.seed = spec.seed + 104729 + uint64_t(k);
    auto convs = make_serve_workload(w, ids);
    ServeRunOptions o = run;
    o.request_rate = kInf;
    o.max_concurrency = 1;
    o.scrape_interval_s = 0;
    if (k == 1)
      o.customize = [&](size_t, nlohmann::json& b) {
        b["response_format"] = json_schema_format(schema);
      };
    if (k == 2)
      o.customize = [&](size_t conv, nlohmann::json& b) {
        b["response_format"] = json_schema_format(schema, fmt::format("{:x}-{}", nonce, conv));
      };
    auto r = run_serve(convs, o);
    const nlohmann::json rep = summarize(r.records, r.duration_s, Slo{});
    out[kinds[k]] = {{"ttft_ms", rep["ttft_ms"]}, {"errors", rep["errors"]}};
  }
  const double plain = out["unconstrained"]["ttft_ms"]["p50"].get<double>();
  out["added_ms_p50"] = {{"warm", out["warm"]["ttft_ms"]["p50"].get<double>() - plain},
                         {"cold", out["cold"]["ttft_ms"]["p50"].get<double>() - plain}};
  out["probes"] = probes;
  return out;
}

void print_structured(const nlohmann::json& s) {
  const auto& a = s["unconstrained"];
  const auto& b = s["structured"];
  std::printf(
      "\n| run | requests | out tokens | out tok/s | TTFT p50 ms | TPOT p50 ms | errors |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto* r : {&a, &b})
    std::printf("| %s | %lld | %lld | %.1f | %.1f | %.2f | %lld |\n",
                r == &a ? "unconstrained" : "json_schema",
                static_cast<long long>((*r)["completed"].get<int64_t>()),
                static_cast<long long>((*r)["output_tokens"].get<int64_t>()),
                (*r)["output_tokens_per_s"].get<double>(), (*r)["ttft_ms"]["p50"].get<double>(),
                (*r)["tpot_ms"]["p50"].get<double>(),
                static_cast<long long>((*r)["errors"].get<int64_t>()));
  std::printf("\njson_schema / unconstrained output tok/s: %.3f\n",
              s["output_tok_s_ratio"].get<double>());
  const auto& m = s["mask_time_us"];
  if (m.contains("p50"))
    std::printf(
        "mask fill per sequence per token (host): mean %.1f us, p50 %.1f us, p99 %.1f us over "
        "%.0f\n",
        m["mean"].get<double>(), m["p50"].get<double>(), m["p99"].get<double>(),
        m["count"].get<double>());
  if (s.contains("compile_ttft")) {
    const auto& c = s["compile_ttft"];
    std::printf(
        "TTFT p50 (%lld sequential requests each): unconstrained %.1f ms, warm cache %.1f ms "
        "(+%.1f), "
        "cold %.1f ms (+%.1f)\n",
        static_cast<long long>(c["probes"].get<int64_t>()),
        c["unconstrained"]["ttft_ms"]["p50"].get<double>(),
        c["warm"]["ttft_ms"]["p50"].get<double>(), c["added_ms_p50"]["warm"].get<double>(),
        c["cold"]["ttft_ms"]["p50"].get<double>(), c["added_ms_p50"]["cold"].get<double>());
  }
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  CLI::App app{"Serving benchmark: streams a workload to an OpenAI-compatible server",
               "bench serve"};
  show_defaults(app);
  ServeRunOptions run;
  ServeWorkloadSpec spec;
  std::string endpoint = "completions", prompt_format = "auto", rate = "inf", sweep, output, plot,
              label;
  std::vector<int32_t> id_range = {1000, 20000};
  int64_t warmup = 2, compile_probes = 8;
  std::string json_schema_path;
  bool no_ignore_eos = false, json_only = false, profile = false;
  Slo slo;
  app.add_option("--base-url", run.base_url, "server, e.g. http://127.0.0.1:8000 (without /v1)")
      ->required();
  app.add_option("--model", run.body.model,
                 "model name to send (default: the first of /v1/models)");
  app.add_option("--label", label, "name of the server in the report (loom, llama.cpp...)");
  app.add_option("--num-requests", spec.num_requests, "measured requests (turns, for multi-turn)");
  app.add_option("--max-concurrency", run.max_concurrency,
                 "at most this many requests in flight (0: no bound)");
  app.add_option("--request-rate", rate,
                 "Poisson arrivals at this many requests/s, or inf (all at once)");
  app.add_option("--dataset", spec.dataset, "synthetic | fixed | shared-prefix | multi-turn")
      ->check(CLI::IsMember({"synthetic", "fixed", "shared-prefix", "multi-turn"}));
  app.add_option("--input-len", spec.input_len,
                 "fixed: prompt tokens; shared-prefix/multi-turn: question tokens");
  app.add_option("--output-len", spec.output_len, "fixed/shared-prefix/multi-turn: output tokens");
  app.add_option("--max-len", spec.max_len, "synthetic: cap of prompt and output lengths");
  app.add_option("--num-prefixes", spec.num_prefixes, "shared-prefix: system prompts");
  app.add_option("--prefix-len", spec.prefix_len, "shared-prefix: tokens per system prompt");
  app.add_option("--num-turns", spec.num_turns, "multi-turn: turns per conversation");
  app.add_option("--warmup", warmup, "warm-up requests before measuring (not reported)");
  app.add_option("--seed", spec.seed, "workload and arrival seed");
  app.add_option("--endpoint", endpoint, "completions or chat")
      ->check(CLI::IsMember({"completions", "chat"}));
  app.add_option("--prompt-format", prompt_format,
                 "auto (ids for completions, text for chat) | ids | text")
      ->check(CLI::IsMember({"auto", "ids", "text"}));
  app.add_option("--token-id-range", id_range, "ids prompts: ids drawn uniformly from [LO,HI)")
      ->delimiter(',')
      ->expected(2);
  app.add_flag("--no-ignore-eos", no_ignore_eos, "do not send ignore_eos (outputs may end early)");
  app.add_option("--slo-ttft-ms", slo.ttft_ms, "goodput SLO on time to first token (<= 0: none)");
  app.add_option("--slo-tpot-ms", slo.tpot_ms, "goodput SLO on time per output token (<= 0: none)");
  app.add_option("--slo-e2e-ms", slo.e2e_ms, "goodput SLO on end-to-end latency (<= 0: none)");
  app.add_option("--timeout", run.timeout_s, "seconds to wait for the server at each step");
  app.add_option("--scrape-interval", run.scrape_interval_s,
                 "seconds between /metrics scrapes during a run");
  app.add_option("--server-pid", run.server_pid,
                 "local server's pid: sample its resident memory from /proc");
  app.add_option("--sweep", sweep,
                 "comma-separated request rates to run one after another (e.g. 1,2,4,8,inf)");
  app.add_option("--plot", plot, "sweep: PNG to draw (\"\": --output with .png)");
  app.add_option(
      "--output", output,
      "write the JSON report to this file too (a sweep: bench_serve_sweep.json when \"\")");
  app.add_option(
      "--json-schema", json_schema_path,
      "structured output: run the workload unconstrained, then again with every request "
      "under this JSON schema (a file; e.g. bench/schemas/records.json), and report both, "
      "the server's per-token mask time and the TTFT a grammar compile adds");
  app.add_option(
      "--compile-probes", compile_probes,
      "--json-schema: sequential requests per TTFT probe (unconstrained, warm, cold; 0: none)");
  app.add_flag("--profile", profile,
               "also report where a loom server's time went: its step profile (the server runs "
               "with --profile-steps) and its request stages from /metrics, over each run");
  app.add_flag("--json", json_only, "print only the JSON line");
  SoakOptions soak;
  double soak_minutes = 0, soak_warmup_minutes = -1;
  app.add_option("--soak-minutes", soak_minutes,
                 "soak: run a mixed workload (streams, non-streams, disconnects, bad requests, a "
                 "tenant at its limit) this long, one JSON line per --soak-report-seconds")
      ->check(CLI::Range(0.0, 7.0 * 24 * 60));
  app.add_option("--soak-report-seconds", soak.report_interval_s, "soak: seconds per report line")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--soak-warmup-minutes", soak_warmup_minutes,
                 "soak: RSS slopes from this minute on (default min(10, duration / 6))");
  app.add_option("--api-key", soak.api_key, "soak: send 'Authorization: Bearer KEY'");
  app.add_option("--limited-api-key", soak.limited_api_key,
                 "soak: key of a tenant limited to one request at a time (the 'tenant at its "
                 "limit' requests; none without it)");
  LOOM_PARSE(app, argc, argv);
  // One connection per request in flight: at thousands of requests a second
  // against a server that falls behind, far past the usual soft limit.
  raise_open_file_limit(size_t(1) << 16);
  if (soak_minutes > 0) {
    try {
      soak.base_url = run.base_url;
      soak.model =
          run.body.model.empty() ? first_model(run.base_url, soak.api_key) : run.body.model;
      if (soak.model.empty()) LOOM_THROW("{} lists no model (pass --model)", run.base_url);
      soak.duration_s = soak_minutes * 60;
      if (soak_warmup_minutes >= 0) soak.warmup_s = soak_warmup_minutes * 60;
      soak.concurrency = run.max_concurrency > 0 ? run.max_concurrency : 8;
      soak.seed = spec.seed;
      soak.server_pid = run.server_pid;
      soak.timeout_s = run.timeout_s;
      if (id_range.size() != 2 || id_range[0] < 0 || id_range[1] <= id_range[0])
        LOOM_THROW("--token-id-range needs LO,HI with 0 <= LO < HI");
      for (int32_t i = id_range[0]; i < id_range[1]; ++i) soak.token_ids.push_back(i);
      nlohmann::json report = run_soak(soak, stdout);
      report["base_url"] = soak.base_url;
      report["model"] = soak.model;
      report["machine"] = machine_info();
      if (!output.empty()) {
        std::ofstream f(output);
        if (!f) LOOM_THROW("cannot write {}", output);
        f << report.dump(2) << "\n";
      }
      std::printf("%s\n", report.dump().c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom bench serve: error: %s\n", e.what());
      return 1;
    }
  }

  try {
    run.body.endpoint = endpoint == "chat" ? ServeEndpoint::Chat : ServeEndpoint::Completions;
    if (prompt_format == "auto") prompt_format = endpoint == "chat" ? "text" : "ids";
    if (prompt_format == "ids" && endpoint == "chat")
      LOOM_THROW("--prompt-format ids needs --endpoint completions");
    run.body.token_ids = prompt_format == "ids";
    run.body.ignore_eos = !no_ignore_eos;
    if (run.body.model.empty()) run.body.model = first_model(run.base_url);
    if (id_range.size() != 2 || id_range[0] < 0 || id_range[1] <= id_range[0])
      LOOM_THROW("--token-id-range needs LO,HI with 0 <= LO < HI");
    std::vector<int32_t> ids;
    if (run.body.token_ids) {
      for (int32_t i = id_range[0]; i < id_range[1]; ++i) ids.push_back(i);
    } else {
      for (size_t i = 0; i < prompt_words().size(); ++i) ids.push_back(static_cast<int32_t>(i));
    }
    std::vector<double> rates;
    if (!sweep.empty()) {
      std::stringstream ss(sweep);
      std::string item;
      while (std::getline(ss, item, ',')) rates.push_back(parse_rate(item));
    } else {
      rates.push_back(parse_rate(rate));
    }
    if (rates.empty()) LOOM_THROW("--sweep needs at least one rate");
    nlohmann::json schema;
    if (!json_schema_path.empty()) {
      if (rates.size() > 1) LOOM_THROW("--json-schema runs one rate, not a --sweep");
      if (spec.dataset == "multi-turn") LOOM_THROW("--json-schema needs a single-turn dataset");
      schema = read_json_file(json_schema_path);
    }

    // Each rate of a sweep gets its own prompts (seed + index), so a prefix
    // cache cannot serve one rate from the prompts of the one before.
    auto counter = [&](const std::string& text) {
      return count_tokens_remote(run.base_url, run.body.model, text);
    };
    const bool have_tokenizer = !run.body.token_ids && counter(" the").has_value();
    int64_t off_target = 0;
    auto workload_for = [&](size_t index) {
      ServeWorkloadSpec s = spec;
      s.seed = spec.seed + index;
      auto convs = make_serve_workload(s, ids);
      if (have_tokenizer) off_target += calibrate_text(convs, counter, s.seed);
      return convs;
    };

    if (warmup > 0) {
      ServeWorkloadSpec w = spec;
      w.dataset = "fixed";
      w.num_requests = warmup;
      w.input_len = std::min(spec.input_len, 64);
      w.output_len = 4;
      w.seed = spec.seed + 7919;
      auto wconvs = make_serve_workload(w, ids);
      if (have_tokenizer) calibrate_text(wconvs, counter, w.seed);
      ServeRunOptions wo = run;
      wo.request_rate = kInf;
      wo.scrape_interval_s = 0;
      if (!schema.is_null())  // compiles the schema once: the measured run starts warm
        wo.customize = [&](size_t, nlohmann::json& b) {
          b["response_format"] = json_schema_format(schema);
        };
      auto wr = run_serve(wconvs, wo);
      int64_t bad = 0;
      for (const auto& r : wr.records) bad += !r.ok;
      if (bad == static_cast<int64_t>(wr.records.size()))
        LOOM_THROW("every warm-up request failed, first: {}",
                   wr.records.empty() ? "" : wr.records[0].error);
    }

    nlohmann::json base;
    base["benchmark"] = "serve";
    if (!label.empty()) base["label"] = label;
    base["base_url"] = run.base_url;
    base["model"] = run.body.model;
    base["endpoint"] = endpoint;
    base["prompt_format"] = prompt_format;
    base["ignore_eos"] = run.body.ignore_eos;
    base["dataset"] = spec.dataset;
    base["workload"] = {{"num_requests", spec.num_requests},
                        {"seed", spec.seed},
                        {"input_len", spec.input_len},
                        {"output_len", spec.output_len},
                        {"max_len", spec.max_len}};
    if (spec.dataset == "shared-prefix")
      base["workload"].update(
          {{"num_prefixes", spec.num_prefixes}, {"prefix_len", spec.prefix_len}});
    if (spec.dataset == "multi-turn") base["workload"]["num_turns"] = spec.num_turns;
    base["warmup_requests"] = warmup;
    base["max_concurrency"] = run.max_concurrency;
    base["machine"] = machine_info();

    if (!schema.is_null()) {
      // Unconstrained, then the same shape of workload (prompts of their own,
      // so no prefix-cache help) under the schema; then the TTFT probes.
      nlohmann::json s;
      for (int k = 0; k < 2; ++k) {
        const auto convs = workload_for(size_t(k));
        ServeRunOptions o = run;
        o.request_rate = rates[0];
        o.seed = spec.seed + size_t(k);
        o.on_progress = progress_line(k == 0 ? "unconstrained" : "json_schema");
        if (k == 1)
          o.customize = [&](size_t, nlohmann::json& b) {
            b["response_format"] = json_schema_format(schema);
          };
        const PromHistogram before = scrape_mask_time(run.base_url);
        auto result = run_serve(convs, o);
        nlohmann::json rep = summarize(result.records, result.duration_s, slo);
        rep["server"] = result.server;
        if (k == 1) s["mask_time_us"] = histogram_delta_us(before, scrape_mask_time(run.base_url));
        s[k == 0 ? "unconstrained" : "structured"] = std::move(rep);
      }
      const double plain = s["unconstrained"]["output_tokens_per_s"].get<double>();
      s["output_tok_s_ratio"] =
          plain > 0 ? s["structured"]["output_tokens_per_s"].get<double>() / plain : 0.0;
      if (compile_probes > 0)
        s["compile_ttft"] = compile_ttft(run, spec, ids, schema, compile_probes);
      s["schema_file"] = json_schema_path;
      s["request_rate"] = rate_name(rates[0]);
      nlohmann::json report = base;
      report["benchmark"] = "serve_structured";
      report["structured"] = s;
      if (!output.empty()) {
        std::ofstream f(output);
        if (!f) LOOM_THROW("cannot write {}", output);
        f << report.dump(2) << "\n";
      }
      std::printf("%s\n", report.dump().c_str());
      if (!json_only) print_structured(s);
      return 0;
    }

    std::vector<nlohmann::json> reports;
    for (size_t i = 0; i < rates.size(); ++i) {
      const double r = rates[i];
      const auto convs = workload_for(i);
      ServeRunOptions o = run;
      o.request_rate = r;
      o.seed = spec.seed + i;
      o.on_progress = progress_line(rate_name(r));
      std::optional<ServerProfile> profile_before;
      if (profile) profile_before = read_server_profile(run.base_url);
      auto result = run_serve(convs, o);
      nlohmann::json rep = summarize(result.records, result.duration_s, slo);
      rep["request_rate"] = rate_name(r);
      rep["server"] = result.server;
      if (profile_before)
        rep.update(server_profile_report(*profile_before, read_server_profile(run.base_url),
                                         result.duration_s));
      reports.push_back(std::move(rep));
      if (rates.size() > 1)
        std::fprintf(stderr, "rate %s: %.3f req/s, TTFT p99 %.1f ms\n", rate_name(r).c_str(),
                     reports.back()["requests_per_s"].get<double>(),
                     reports.back()["ttft_ms"]["p99"].get<double>());
    }

    if (!run.body.token_ids)
      base["text_calibration"] = {{"tokenizer_endpoint", have_tokenizer},
                                  {"pieces_off_target", off_target}};
    nlohmann::json report = base;
    if (rates.size() == 1) {
      report.update(reports[0]);
    } else {
      report["sweep"] = reports;
      // The plot is drawn from the JSON report, so a sweep always writes one.
      if (output.empty()) output = "bench_serve_sweep.json";
      if (plot.empty()) {
        plot = output;
        if (plot.size() > 5 && plot.substr(plot.size() - 5) == ".json")
          plot.resize(plot.size() - 5);
        plot += ".png";
      }
    }
    if (!output.empty()) {
      std::ofstream f(output);
      if (!f) LOOM_THROW("cannot write {}", output);
      f << report.dump(2) << "\n";
    }
    if (rates.size() > 1) plot_sweep(output, plot);
    print_report(report, json_only);
    if (rates.size() > 1 && !json_only) print_sweep_table(rates, reports);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom bench serve: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace loom::cli
