// Writes the fuzzers' seed corpus: make_fuzz_seeds GGUF_DIR SAFETENSORS_DIR.
// Seeds come from the test writers, so they follow the formats as tested.
#include <cstdio>
#include <fstream>
#include <string>

#include "gguf_writer.h"
#include "safetensors_writer.h"

namespace {

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::testing;
  using loom::GgufType;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s GGUF_DIR SAFETENSORS_DIR\n", argv[0]);
    return 2;
  }
  const std::string g = argv[1], s = argv[2];
  write(g + "/small_v2.gguf", small_valid_gguf(2));
  write(g + "/small_v3.gguf", small_valid_gguf(3));

  GgufWriter all;
  all.kv("general.alignment", gv_u(GgufType::U32, 16));
  all.alignment = 16;
  all.kv("u8", gv_u(GgufType::U8, 1)).kv("i8", gv_i(GgufType::I8, -1)).kv("u16", gv_u(GgufType::U16, 2));
  all.kv("i16", gv_i(GgufType::I16, -2)).kv("i32", gv_i(GgufType::I32, -3)).kv("u64", gv_u(GgufType::U64, 4));
  all.kv("i64", gv_i(GgufType::I64, -4)).kv("f64", gv_f(GgufType::F64, 0.5)).kv("b", gv_bool(true));
  all.kv("nested", gv_arr(GgufType::ARRAY, {gv_arr(GgufType::STRING, {gv_str("x")}), gv_arr(GgufType::I16, {})}));
  const uint32_t types[] = {0, 1, 30, 8, 2, 12, 13, 14, 3, 6, 7};
  const size_t bytes_per_256[] = {1024, 512, 512, 272, 144, 144, 176, 210, 160, 176, 192};
  for (size_t i = 0; i < std::size(types); ++i)
    all.tensor("t" + std::to_string(i), {256, 1}, types[i], std::vector<uint8_t>(bytes_per_256[i], 7));
  write(g + "/all_types.gguf", all.build());

  write(s + "/small.safetensors", small_valid_safetensors());
  write(s + "/dtypes.safetensors",
        build_safetensors({{"a", "F32", {2, 2}, std::vector<uint8_t>(16)},
                           {"b", "I64", {1}, std::vector<uint8_t>(8)},
                           {"c", "I8", {}, std::vector<uint8_t>(1)},
                           {"d", "F16", {0}, {}}}));
  return 0;
}
