// libFuzzer harness: any input must parse or raise loom::Error; accepted
// tensors must lie inside the input (first and last bytes are read for ASan).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = loom::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& info : f->tensors()) {
      const loom::Tensor t = f->tensor(info);
      const auto* p = t.data_as<const uint8_t>();
      if (info.nbytes) sink = sink + p[0] + p[info.nbytes - 1];
      if (static_cast<uint64_t>(t.nbytes()) != info.nbytes) __builtin_trap();
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
