// loom env: what this machine and this build offer.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "cli.h"

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

}  // namespace

int cmd_env(int argc, char** argv) {
  CLI::App app{"Print what this machine and this build offer"};
  bool json = false;
  app.add_flag("--json", json, "print JSON");
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
    nlohmann::json out = {
        {"cpu", {{"model", cpu_model()},
                 {"threads", std::thread::hardware_concurrency()},
                 {"features", features}}},
        {"build", {{"cuda", false}, {"compiler", __VERSION__}}},
        {"gpus", nlohmann::json::array()},
    };
    if (json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("cpu: %s, %u threads\n", cpu_model().c_str(), std::thread::hardware_concurrency());
      std::printf("cpu features:");
      for (auto& [k, v] : features.items())
        if (v.get<bool>()) std::printf(" %s", k.c_str());
      std::printf("\nbuild: CUDA %s\ngpus: none\n", "off");
    }
    return 0;
  });
}

}  // namespace loom::cli
