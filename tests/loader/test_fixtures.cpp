// Cross-check against the reference writers: tests/fixtures/loader holds a
// GGUF file written by the `gguf` package and a safetensors file written by
// the `safetensors` package, with expected.json saying what they contain
// (all produced by scripts/make_loader_fixtures.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/loader/gguf.h"
#include "model/loader/safetensors.h"

namespace loom {
namespace {

const std::string kDir = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/loader/";

nlohmann::json expected() {
  std::ifstream f(kDir + "expected.json");
  return nlohmann::json::parse(f);
}

// Byte statistics the script recorded for each tensor.
void expect_bytes(const Tensor& t, const nlohmann::json& e, const std::string& name) {
  const auto* p = t.data_as<const uint8_t>();
  const auto n = static_cast<size_t>(t.nbytes());
  ASSERT_EQ(n, e["nbytes"].get<size_t>()) << name;
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  EXPECT_EQ(p[0], e["first"].get<int>()) << name;
  EXPECT_EQ(p[n - 1], e["last"].get<int>()) << name;
  EXPECT_EQ(sum, e["sum"].get<uint64_t>()) << name;
}

void expect_value(const GgufValue& v, const nlohmann::json& e, const std::string& key) {
  if (e.is_array()) {
    const GgufArray& a = v.as_array();
    ASSERT_EQ(a.values.size(), e.size()) << key;
    for (size_t i = 0; i < e.size(); ++i) expect_value(a.values[i], e[i], key);
  } else if (e.is_string()) {
    EXPECT_EQ(v.as_string(), e.get<std::string>()) << key;
  } else if (e.is_boolean()) {
    EXPECT_EQ(v.as_bool(), e.get<bool>()) << key;
  } else if (e.is_number_float()) {
    EXPECT_DOUBLE_EQ(v.as_float(), e.get<double>()) << key;
  } else if (e.is_number_unsigned() && v.type == GgufType::U64) {
    EXPECT_EQ(std::get<uint64_t>(v.value), e.get<uint64_t>()) << key;
  } else {
    EXPECT_EQ(v.as_int(), e.get<int64_t>()) << key;
  }
}

TEST(ReferenceFixtures, GgufFromTheGgufPackage) {
  const auto exp = expected()["gguf"];
  GgufFile f(kDir + "tiny.gguf");
  EXPECT_EQ(f.version(), 3u);
  for (const auto& [key, e] : exp["metadata"].items()) {
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(gguf_type_name(v->type), e["type"].get<std::string>()) << key;
    expect_value(*v, e["value"], key);
  }
  ASSERT_EQ(f.tensors().size(), exp["tensors"].size());
  for (const auto& e : exp["tensors"]) {
    const auto name = e["name"].get<std::string>();
    const GgufTensorInfo* info = f.find_tensor(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, dtype_from_ggml_type(e["ggml_type"].get<uint32_t>())) << name;
    EXPECT_EQ(info->shape, e["shape"].get<std::vector<int64_t>>()) << name;
    expect_bytes(f.tensor(*info), e, name);
  }
}

TEST(ReferenceFixtures, SafetensorsFromTheSafetensorsPackage) {
  const auto exp = expected()["safetensors"];
  SafetensorsFile f(kDir + "tiny.safetensors");
  ASSERT_EQ(f.tensors().size(), exp["tensors"].size());
  for (const auto& e : exp["tensors"]) {
    const auto name = e["name"].get<std::string>();
    const SafetensorsTensorInfo* info = f.find_tensor(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, dtype_from_safetensors(e["dtype"].get<std::string>())) << name;
    EXPECT_EQ(info->shape, e["shape"].get<std::vector<int64_t>>()) << name;
    expect_bytes(f.tensor(*info), e, name);
  }
}

}  // namespace
}  // namespace loom
