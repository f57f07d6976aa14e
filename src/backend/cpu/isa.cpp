// Run-time instruction-set detection and the process-wide selection.
#include "backend/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace loom::cpu {
namespace {

Isa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512vnni")) return Isa::Avx512Vnni;
  if (avx512) return Isa::Avx512;
  if (avx2) return Isa::Avx2;
  return Isa::Portable;
}

Isa clamp(Isa isa) {
  return static_cast<int>(isa) > static_cast<int>(detected_isa()) ? detected_isa() : isa;
}

Isa from_env() {
  const char* env = std::getenv("LOOM_CPU_ISA");
  if (!env || !*env) return detected_isa();
  const std::string v(env);
  if (v == "portable") return Isa::Portable;
  if (v == "avx2") return clamp(Isa::Avx2);
  if (v == "avx512") return clamp(Isa::Avx512);
  if (v == "avx512vnni") return clamp(Isa::Avx512Vnni);
  LOOM_THROW("LOOM_CPU_ISA={} is not one of portable, avx2, avx512, avx512vnni", v);
}

std::atomic<int>& selected() {
  static std::atomic<int> isa{static_cast<int>(from_env())};
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Portable:
      return "portable";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  return static_cast<Isa>(selected().load(std::memory_order_relaxed));
}

Isa set_cpu_isa(Isa isa) {
  const Isa chosen = clamp(isa);
  selected().store(static_cast<int>(chosen), std::memory_order_relaxed);
  return chosen;
}

}  // namespace loom::cpu
