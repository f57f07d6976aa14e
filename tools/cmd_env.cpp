// loom env: what this machine and this build offer.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "backend/registry/registry.h"
#include "cli.h"
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

// GPUs, driver and libraries; with a model, whether it fits on GPU 0.
nlohmann::json gpu_section(const std::string& model_path, double utilization, int64_t context) {
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
  if (!model_path.empty() && !env.gpus.empty()) {
    const LoadedModel m = open_model(model_path);
    const ModelConfig& c = m.config;
    int64_t weight_bytes = 0;  // as the GPU holds them: bf16
    for (const std::string& name : m.weights->names())
      if (auto t = m.weights->find(name)) weight_bytes += 2 * t->numel();
    const int64_t kv_per_token = 2 * 2 * c.num_layers * c.num_kv_heads * c.head_dim;
    const int64_t ctx = context > 0 ? context : (c.max_position > 0 ? c.max_position : 4096);
    const int64_t need_kv = kv_per_token * ctx;
    const int64_t reserve = int64_t{1} << 30;
    const auto budget = static_cast<int64_t>(utilization * double(env.gpus[0].memory_total));
    const int64_t kv_room = budget - weight_bytes - reserve;
    out["fit"] = {{"model", model_path},
                  {"weights_bytes", weight_bytes},
                  {"kv_bytes_per_token", kv_per_token},
                  {"context", ctx},
                  {"gpu_memory_utilization", utilization},
                  {"kv_room_bytes", std::max<int64_t>(0, kv_room)},
                  {"max_tokens_in_kv", kv_room > 0 ? kv_room / kv_per_token : 0},
                  {"fits", kv_room >= need_kv}};
  }
  return out;
}

}  // namespace

int cmd_env(int argc, char** argv) {
  CLI::App app{"Print what this machine and this build offer"};
  bool json = false;
  std::string model;
  double utilization = 0.9;
  int64_t context = 0;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--model", model, "also say whether this model's weights and a KV budget fit on GPU 0");
  app.add_option("--gpu-memory-utilization", utilization, "fraction of GPU memory loom may use")
      ->check(CLI::Range(0.05, 1.0));
  app.add_option("--max-model-len", context, "context the KV budget must hold at least once (0: the model's)");
  CLI11_PARSE(app, argc, argv);
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
    const nlohmann::json gpu = gpu_section(model, utilization, context);
    nlohmann::json out = {
        {"cpu", {{"model", cpu_model()},
                 {"threads", std::thread::hardware_concurrency()},
                 {"features", features}}},
        {"build", gpu["build"]},
        {"gpus", gpu["gpus"]},
    };
    out["build"]["compiler"] = __VERSION__;
    for (const char* k : {"driver", "cuda_runtime", "cublaslt", "nccl", "error", "fit"})
      if (gpu.contains(k)) out[k] = gpu[k];
    if (json) {
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    std::printf("cpu: %s, %u threads\n", cpu_model().c_str(), std::thread::hardware_concurrency());
    std::printf("cpu features:");
    for (auto& [k, v] : features.items())
      if (v.get<bool>()) std::printf(" %s", k.c_str());
    std::printf("\n");
    if (!out["build"]["cuda"].get<bool>()) {
      std::printf("build: CUDA off\ngpus: none\n");
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
    if (out.contains("fit")) {
      const auto& f = out["fit"];
      std::printf("model %s: weights %.2f GiB (bf16), KV %.0f KiB/token; at utilization %.2f the KV cache holds "
                  "%lld tokens; a %lld-token context %s\n",
                  f["model"].get<std::string>().c_str(), f["weights_bytes"].get<double>() / 1073741824.0,
                  f["kv_bytes_per_token"].get<double>() / 1024.0, f["gpu_memory_utilization"].get<double>(),
                  static_cast<long long>(f["max_tokens_in_kv"].get<int64_t>()),
                  static_cast<long long>(f["context"].get<int64_t>()), f["fits"].get<bool>() ? "fits" : "does NOT fit");
    }
    return 0;
  });
}

}  // namespace loom::cli
