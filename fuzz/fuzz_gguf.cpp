// libFuzzer harness: any input must parse or raise loom::Error; every tensor
// the parser accepts must lie inside the input (its first and last bytes are
// read, so ASan reports an extent that escapes the buffer).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/loader/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = loom::GgufFile::from_memory(data, size, "fuzz.gguf");
    volatile uint8_t sink = 0;
    for (const auto& info : f->tensors()) {
      const loom::Tensor t = f->tensor(info);
      const auto* p = t.data_as<const uint8_t>();
      if (info.nbytes) sink = sink + p[0] + p[info.nbytes - 1];
      if (static_cast<uint64_t>(t.nbytes()) != info.nbytes) __builtin_trap();
    }
    for (const auto& [key, value] : f->metadata()) {
      try {
        (void)f->get_string_array(key);
      } catch (const loom::Error&) {
      }
      try {
        (void)f->get_float_array(key);
      } catch (const loom::Error&) {
      }
      try {
        (void)f->get_int(key, 0);
      } catch (const loom::Error&) {
      }
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
