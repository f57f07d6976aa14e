// loom env: what this machine and this build offer.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "backend/registry/registry.h"
#include "cli.h"
#include "cli_app.h"
#include "model/loader/weights.h"
#include "model/model.h"

namespace loom::cli {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}


// CUDA versions are 1000 * major + 10 * minor; cuBLASLt and NCCL (2.9+) ones
// 10000 * major + 100 * minor + patch.
std::string version_str(long v, bool three_part) {
  if (v <= 0) return "none";
  if (three_part) return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

// A linear layer's weight matrix (what FP8 quantises): blk.N.attn_{q,k,v,output}
// or blk.N.ffn_{gate,up,down}.
bool is_linear_weight(const std::string& name) {
  if (!name.starts_with("blk.") || !name.ends_with(".weight")) return false;
  for (const char* m : {".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.", ".ffn_gate.",
                        ".ffn_up.", ".ffn_down."})
    if (name.find(m) != std::string::npos) return true;
  return false;
}

// The model's dtypes and quantisation, its weights as the GPU holds them
// (matrices bf16 or FP8, vectors and scales f32) as stored and with FP8
// linear layers (--quantization fp8: 1 byte per value plus a scale per row),
// and the KV cache each leaves at `utilization` of `memory_total`, in bf16
// and FP8 E4M3 (no such options without a GPU: memory_total 0).
nlohmann::json model_fit(const std::string& model_path, double utilization, int64_t context,
                         size_t memory_total) {
  const LoadedModel m = open_model(model_path);
  const ModelConfig& c = m.config;
  int64_t stored = 0, fp8 = 0;
  std::map<std::string, int64_t> params_by_dtype;
  for (const std::string& name : m.weights->names()) {
    const auto t = m.weights->find(name);
    if (!t) continue;
    params_by_dtype[std::string(dtype_name(t->dtype()))] += t->numel();
    const int64_t as_stored = t->dtype() == DType::F8_E4M3 ? t->numel()
                              : t->ndim() >= 2             ? 2 * t->numel()
                                                           : 4 * t->numel();
    stored += as_stored;
    fp8 += is_linear_weight(name) && t->dtype() != DType::F8_E4M3 ? t->numel() + 4 * t->dim(0)
                                                                  : as_stored;
  }
  const int64_t kv_elems_per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim;
  const int64_t ctx = context > 0 ? context : (c.max_position > 0 ? c.max_position : 4096);
  const int64_t reserve = int64_t{1} << 30;
  const auto budget = static_cast<int64_t>(utilization * double(memory_total));
  nlohmann::json options = nlohmann::json::array();
  for (const bool fp8_weights : memory_total ? std::vector<bool>{false, true} : std::vector<bool>{})
    for (const int kv_bytes : {2, 1}) {
      if (fp8_weights && c.quantization.fp8) continue;  // already FP8: the rows as stored say it
      const int64_t weights = fp8_weights ? fp8 : stored;
      const int64_t room = budget - weights - reserve;
      const int64_t per_token = kv_bytes * kv_elems_per_token;
      options.push_back({{"weights", fp8_weights ? "fp8 (--quantization fp8)" : "as stored"},
                         {"kv_cache_dtype", kv_bytes == 2 ? "bf16" : "fp8"},
                         {"weights_bytes", weights},
                         {"kv_bytes_per_token", per_token},
                         {"max_tokens_in_kv", room > 0 ? room / per_token : 0},
                         {"fits", room >= per_token * ctx}});
    }
  nlohmann::json fit = {{"model", model_path},
                        {"params_by_dtype", params_by_dtype},
                        {"quantization", c.quantization.describe()},
                        {"weights_bytes", stored},
                        {"kv_bytes_per_token", 2 * kv_elems_per_token},
                        {"context", ctx},
                        {"options", options}};
  if (!options.empty()) {
    fit["gpu_memory_utilization"] = utilization;
    fit["kv_room_bytes"] = std::max<int64_t>(0, budget - stored - reserve);
    fit["max_tokens_in_kv"] = options[0]["max_tokens_in_kv"];
    fit["fits"] = options[0]["fits"];
  }
  return fit;
}

// GPUs, driver and libraries.
nlohmann::json gpu_section() {
  nlohmann::json out = nlohmann::json::object();
  const GpuEnvironment env = gpu_environment();
  if (!env.built) {
    out["build"] = {{"cuda", false}};
    out["gpus"] = nlohmann::json::array();
    return out;
  }
  out["build"] = {{"cuda", true}, {"archs", env.build_archs}};
  out["driver"] = version_str(env.driver_version, false);
  out["cuda_runtime"] = version_str(env.runtime_version, false);
  out["cublaslt"] = version_str(static_cast<long>(env.cublaslt_version), true);
  out["nccl"] = version_str(env.nccl_version, true);
  if (!env.error.empty()) out["error"] = env.error;
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuInfo& g : env.gpus) {
    nlohmann::json j = {{"index", g.index},
                        {"name", g.name},
                        {"compute_capability", fmt::format("{}.{}", g.major, g.minor)},
                        {"multiprocessors", g.multiprocessors},
                        {"memory_total_bytes", g.memory_total},
                        {"memory_free_bytes", g.memory_free},
                        {"supported", g.supported}};
    if (!g.problem.empty()) j["problem"] = g.problem;
    gpus.push_back(j);
  }
  out["gpus"] = gpus;
  return out;
}

}  // namespace

int cmd_env(int argc, char** argv) {
  CLI::App app{"Print what this machine and this build offer"};
  show_defaults(app);
  bool json = false;
  std::string model;
  double utilization = 0.9;
  int64_t context = 0;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--model", model,
                 "also report the model's dtypes and quantisation, and whether its weights and a "
                 "KV budget fit on "
                 "GPU 0 (as stored and with FP8 weights / FP8 KV cache)");
  app.add_option("--gpu-memory-utilization", utilization, "fraction of GPU memory loom may use")
      ->check(CLI::Range(0.05, 1.0));
  app.add_option("--max-model-len", context, "context the KV budget must hold at least once (0: the model's)");
  LOOM_PARSE(app, argc, argv);
  return guarded("env", [&] {
    __builtin_cpu_init();
    nlohmann::json features = nlohmann::json::object();
    features["avx2"] = static_cast<bool>(__builtin_cpu_supports("avx2"));
    features["fma"] = static_cast<bool>(__builtin_cpu_supports("fma"));
    features["f16c"] = static_cast<bool>(__builtin_cpu_supports("f16c"));
    features["avx512f"] = static_cast<bool>(__builtin_cpu_supports("avx512f"));
    features["avx512bw"] = static_cast<bool>(__builtin_cpu_supports("avx512bw"));
    features["avx512vnni"] = static_cast<bool>(__builtin_cpu_supports("avx512vnni"));
    features["avx512bf16"] = static_cast<bool>(__builtin_cpu_supports("avx512bf16"));
    const nlohmann::json gpu = gpu_section();
    nlohmann::json out = {
        {"cpu", {{"model", cpu_model()},
                 {"threads", std::thread::hardware_concurrency()},
                 {"features", features}}},
        {"build", gpu["build"]},
        {"gpus", gpu["gpus"]},
    };
    out["build"]["compiler"] = __VERSION__;
    for (const char* k : {"driver", "cuda_runtime", "cublaslt", "nccl", "error"})
      if (gpu.contains(k)) out[k] = gpu[k];
    if (!model.empty()) {
      const auto& gpus = out["gpus"];
      out["fit"] = model_fit(model, utilization, context,
                             gpus.empty() ? 0 : gpus[0]["memory_total_bytes"].get<size_t>());
    }
    if (json) {
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    std::printf("cpu: %s, %u threads\n", cpu_model().c_str(), std::thread::hardware_concurrency());
    std::printf("cpu features:");
    for (auto& [k, v] : features.items())
      if (v.get<bool>()) std::printf(" %s", k.c_str());
    std::printf("\n");
    auto print_fit = [&] {
      if (!out.contains("fit")) return;
      const auto& f = out["fit"];
      std::string dtypes;
      for (const auto& [dt, n] : f["params_by_dtype"].items())
        dtypes +=
            fmt::format("{}{} {:.2f}B", dtypes.empty() ? "" : ", ", dt, n.get<double>() / 1e9);
      std::printf("model %s: parameters %s; quantization: %s\n",
                  f["model"].get<std::string>().c_str(), dtypes.c_str(),
                  f["quantization"].get<std::string>().c_str());
      for (const auto& o : f["options"])
        std::printf(
            "  weights %-24s %6.2f GiB, KV %-4s %4.0f KiB/token: at utilization %.2f the KV cache "
            "holds %lld "
            "tokens; a %lld-token context %s\n",
            o["weights"].get<std::string>().c_str(),
            o["weights_bytes"].get<double>() / 1073741824.0,
            o["kv_cache_dtype"].get<std::string>().c_str(),
            o["kv_bytes_per_token"].get<double>() / 1024.0,
            f["gpu_memory_utilization"].get<double>(),
            static_cast<long long>(o["max_tokens_in_kv"].get<int64_t>()),
            static_cast<long long>(f["context"].get<int64_t>()),
            o["fits"].get<bool>() ? "fits" : "does NOT fit");
    };
    if (!out["build"]["cuda"].get<bool>()) {
      std::printf("build: CUDA off\ngpus: none\n");
      print_fit();
      return 0;
    }
    std::printf("build: CUDA on, architectures %s\n", out["build"]["archs"].get<std::string>().c_str());
    std::printf("driver %s, CUDA runtime %s, cuBLASLt %s, NCCL %s\n", out["driver"].get<std::string>().c_str(),
                out["cuda_runtime"].get<std::string>().c_str(), out["cublaslt"].get<std::string>().c_str(),
                out["nccl"].get<std::string>().c_str());
    if (out.contains("error")) std::printf("CUDA: %s\n", out["error"].get<std::string>().c_str());
    if (out["gpus"].empty()) std::printf("gpus: none\n");
    for (const auto& g : out["gpus"]) {
      std::printf("gpu %d: %s, compute capability %s, %d SMs, %.1f GiB (%.1f GiB free)%s\n", g["index"].get<int>(),
                  g["name"].get<std::string>().c_str(), g["compute_capability"].get<std::string>().c_str(),
                  g["multiprocessors"].get<int>(), g["memory_total_bytes"].get<double>() / 1073741824.0,
                  g["memory_free_bytes"].get<double>() / 1073741824.0, g["supported"].get<bool>() ? "" : " UNSUPPORTED");
      if (g.contains("problem")) std::printf("  %s\n", g["problem"].get<std::string>().c_str());
    }
    print_fit();
    return 0;
  });
}

}  // namespace loom::cli
