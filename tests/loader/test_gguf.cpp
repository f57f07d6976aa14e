// GGUF reader tests: files are built in memory by gguf_writer.h, read back
// and compared; broken and hostile variants must raise loom::Error with a
// message that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "gguf_writer.h"
#include "model/loader/gguf.h"
#include "model/loader/weights.h"

namespace loom {
namespace {

using namespace loom::testing;

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t>& b) {
  return GgufFile::from_memory(b.data(), b.size(), "test.gguf");
}

// Expects parsing to throw loom::Error whose message contains `needle`.
void expect_error(const std::vector<uint8_t>& b, const std::string& needle) {
  try {
    parse(b);
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line: " << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("test.gguf: ", 0), 0u) << e.what();
  }
}

bool same(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.value.index() != b.value.index()) return false;
  if (const auto* x = std::get_if<GgufArray>(&a.value)) {
    const auto& y = std::get<GgufArray>(b.value);
    if (x->elem_type != y.elem_type || x->values.size() != y.values.size()) return false;
    for (size_t i = 0; i < x->values.size(); ++i)
      if (!same(x->values[i], y.values[i])) return false;
    return true;
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) return false;
        else return x == std::get<T>(b.value);
      },
      a.value);
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::vector<uint8_t>& bytes, const std::string& name = "model.gguf") {
    path = (std::filesystem::temp_directory_path() /
            ("loom_test_" + std::to_string(::getpid()) + "_" + name))
               .string();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::remove(path.c_str()); }
};

TEST(Gguf, EveryMetadataTypeRoundTrips) {
  std::vector<std::pair<std::string, GgufValue>> kvs = {
      {"u8", gv_u(GgufType::U8, 200)},
      {"i8", gv_i(GgufType::I8, -100)},
      {"u16", gv_u(GgufType::U16, 60000)},
      {"i16", gv_i(GgufType::I16, -30000)},
      {"u32", gv_u(GgufType::U32, 4000000000u)},
      {"i32", gv_i(GgufType::I32, -2000000000)},
      {"u64", gv_u(GgufType::U64, 18000000000000000000ull)},
      {"i64", gv_i(GgufType::I64, -9000000000000000000ll)},
      {"f32", gv_f(GgufType::F32, 0.5)},
      {"f64", gv_f(GgufType::F64, 3.141592653589793)},
      {"bool_t", gv_bool(true)},
      {"bool_f", gv_bool(false)},
      {"string", gv_str("héllo wörld")},
      {"empty_string", gv_str("")},
      {"arr_u8", gv_arr(GgufType::U8, {gv_u(GgufType::U8, 1), gv_u(GgufType::U8, 255)})},
      {"arr_i32", gv_arr(GgufType::I32, {gv_i(GgufType::I32, -1), gv_i(GgufType::I32, 7)})},
      {"arr_f64", gv_arr(GgufType::F64, {gv_f(GgufType::F64, 1e300)})},
      {"arr_bool", gv_arr(GgufType::BOOL, {gv_bool(true), gv_bool(false)})},
      {"arr_str", gv_arr(GgufType::STRING, {gv_str("a"), gv_str(""), gv_str("ccc")})},
      {"arr_empty", gv_arr(GgufType::U64, {})},
      {"arr_nested",
       gv_arr(GgufType::ARRAY,
              {gv_arr(GgufType::STRING, {gv_str("x"), gv_str("y")}), gv_arr(GgufType::I16, {}),
               gv_arr(GgufType::ARRAY, {gv_arr(GgufType::U16, {gv_u(GgufType::U16, 9)})})})},
  };
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w;
    w.version = version;
    for (const auto& [k, v] : kvs) w.kv(k, v);
    auto f = parse(w.build());
    EXPECT_EQ(f->version(), version);
    ASSERT_EQ(f->metadata().size(), kvs.size());
    for (const auto& [k, v] : kvs) {
      const GgufValue* got = f->find(k);
      ASSERT_NE(got, nullptr) << k;
      EXPECT_TRUE(same(*got, v)) << k;
    }
    EXPECT_TRUE(f->tensors().empty());
  }
}

TEST(Gguf, TypedGetters) {
  GgufWriter w;
  w.kv("n", gv_u(GgufType::U32, 42))
      .kv("neg", gv_i(GgufType::I32, -3))
      .kv("big", gv_u(GgufType::U64, UINT64_MAX))
      .kv("x", gv_f(GgufType::F32, 1.5))
      .kv("s", gv_str("llama"))
      .kv("b", gv_bool(true))
      .kv("toks", gv_arr(GgufType::STRING, {gv_str("a"), gv_str("b")}))
      .kv("ints", gv_arr(GgufType::I32, {gv_i(GgufType::I32, 1), gv_i(GgufType::I32, -2)}))
      .kv("floats", gv_arr(GgufType::F32, {gv_f(GgufType::F32, 0.25)}));
  auto f = parse(w.build());
  EXPECT_EQ(f->get_int("n", 0), 42);
  EXPECT_EQ(f->get_int("neg", 0), -3);
  EXPECT_EQ(f->get_int("absent", 7), 7);
  EXPECT_DOUBLE_EQ(f->get_float("x", 0), 1.5);
  EXPECT_DOUBLE_EQ(f->get_float("n", 0), 42.0);
  EXPECT_EQ(f->get_string("s"), "llama");
  EXPECT_EQ(f->get_string("absent", "dflt"), "dflt");
  EXPECT_TRUE(f->get_bool("b", false));
  EXPECT_EQ(f->get_string_array("toks"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f->get_string_array("absent").empty());
  EXPECT_EQ(f->get_int_array("ints"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(f->get_float_array("ints"), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f->get_float_array("floats"), (std::vector<double>{0.25}));
  auto throws_with = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  throws_with([&] { f->get_int("s", 0); }, "metadata 's'");
  throws_with([&] { f->get_int("big", 0); }, "does not fit");
  throws_with([&] { f->get_string("n"); }, "not a string");
  throws_with([&] { f->get_bool("n", false); }, "not a bool");
  throws_with([&] { f->get_string_array("ints"); }, "not of strings");
  throws_with([&] { f->get_int_array("floats"); }, "not of integers");
  throws_with([&] { f->get_float_array("toks"); }, "not of numbers");
  throws_with([&] { f->get_float_array("s"); }, "not an array");
}

TEST(Gguf, SupportedTensorTypesAndSizes) {
  struct Case {
    uint32_t id;
    DType dtype;
    uint64_t bytes_per_256;
  };
  const Case cases[] = {
      {0, DType::F32, 1024}, {1, DType::F16, 512},  {30, DType::BF16, 512}, {8, DType::Q8_0, 8 * 34},
      {2, DType::Q4_0, 8 * 18}, {12, DType::Q4_K, 144}, {13, DType::Q5_K, 176}, {14, DType::Q6_K, 210},
      {3, DType::Q4_1, 8 * 20}, {6, DType::Q5_0, 8 * 22}, {7, DType::Q5_1, 8 * 24},
  };
  GgufWriter w;
  for (const auto& c : cases) {
    const std::string name = std::string("t.") + std::string(ggml_type_name(c.id));
    w.tensor(name, {256, 3}, c.id, std::vector<uint8_t>(c.bytes_per_256 * 3, static_cast<uint8_t>(c.id)));
  }
  const auto bytes = w.build();
  auto f = parse(bytes);
  ASSERT_EQ(f->tensors().size(), std::size(cases));
  for (const auto& c : cases) {
    const std::string name = std::string("t.") + std::string(ggml_type_name(c.id));
    const GgufTensorInfo* info = f->find_tensor(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, c.dtype) << name;
    EXPECT_EQ(info->shape, (std::vector<int64_t>{3, 256})) << name;
    EXPECT_EQ(info->nbytes, c.bytes_per_256 * 3) << name;
    EXPECT_EQ(info->offset % 32, 0u);
    Tensor t = f->tensor(*info);
    EXPECT_EQ(static_cast<uint64_t>(t.nbytes()), info->nbytes);
    EXPECT_EQ(t.data(), bytes.data() + f->data_offset() + info->offset);
    EXPECT_EQ(*t.data_as<uint8_t>(), static_cast<uint8_t>(c.id));
    EXPECT_EQ(dtype_from_ggml_type(c.id), c.dtype);
    EXPECT_EQ(ggml_type_from_dtype(c.dtype), c.id);
  }
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  EXPECT_THROW(f->tensor("nope"), Error);
}

TEST(Gguf, ShapesAreReversed) {
  GgufWriter w;
  w.tensor("emb", {8, 5}, 0, std::vector<uint8_t>(8 * 5 * 4));  // ne = {hidden, vocab}
  w.tensor("v1", {7}, 0, std::vector<uint8_t>(7 * 4));
  w.tensor("v3", {2, 3, 4}, 1, std::vector<uint8_t>(2 * 3 * 4 * 2));
  w.tensor("v4", {2, 3, 4, 5}, 0, std::vector<uint8_t>(2 * 3 * 4 * 5 * 4));
  auto f = parse(w.build());
  EXPECT_EQ(f->find_tensor("emb")->shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(f->find_tensor("v1")->shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(f->find_tensor("v3")->shape, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(f->find_tensor("v4")->shape, (std::vector<int64_t>{5, 4, 3, 2}));
  EXPECT_EQ(f->tensors()[0].name, "emb");  // file order kept
}

TEST(Gguf, Alignment) {
  for (uint64_t align : {1u, 8u, 64u, 4096u}) {
    GgufWriter w;
    w.alignment = align;
    w.kv("general.alignment", gv_u(GgufType::U32, align));
    w.tensor("a", {3}, 0, std::vector<uint8_t>(12));
    w.tensor("b", {5}, 0, std::vector<uint8_t>(20));
    auto f = parse(w.build());
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    EXPECT_EQ(f->find_tensor("b")->offset % align, 0u);
  }
  {
    GgufWriter w;
    w.kv("general.alignment", gv_u(GgufType::U32, 0));
    expect_error(w.build(), "general.alignment 0 is not a non-zero power of two");
  }
  {
    GgufWriter w;
    w.kv("general.alignment", gv_u(GgufType::U32, 48));
    expect_error(w.build(), "not a non-zero power of two");
  }
  {
    GgufWriter w;
    w.kv("general.alignment", gv_i(GgufType::I32, -32));
    expect_error(w.build(), "not a non-zero power of two");
  }
  {
    GgufWriter w;
    w.kv("general.alignment", gv_str("32"));
    expect_error(w.build(), "general.alignment is a string");
  }
  {
    GgufWriter w;
    w.tensor("a", {3}, 0, std::vector<uint8_t>(12));
    w.tensors[0].offset = 4;
    expect_error(w.build(), "tensor 'a' has offset 4, not a multiple of the alignment 32");
  }
}

TEST(Gguf, Versions) {
  EXPECT_EQ(parse(small_valid_gguf(2))->version(), 2u);
  EXPECT_EQ(parse(small_valid_gguf(3))->version(), 3u);
  GgufWriter w;
  w.version = 1;
  expect_error(w.build(), "GGUF v1 is not supported");
  w.version = 4;
  expect_error(w.build(), "unsupported GGUF version 4");
  w.version = 0x03000000;  // v3 written big-endian
  expect_error(w.build(), "big-endian");
  auto bad = small_valid_gguf();
  bad[0] = 'X';
  expect_error(bad, "not a GGUF file");
  expect_error({}, "not a GGUF file");
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  for (uint32_t version : {2u, 3u}) {
    const auto full = small_valid_gguf(version);
    ASSERT_NO_THROW(parse(full));
    for (size_t n = 0; n < full.size(); ++n) {
      // A fresh heap copy of exactly n bytes, so ASan sees any over-read.
      std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_THROW(GgufFile::from_memory(prefix.data(), prefix.size()), Error) << "length " << n;
    }
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  const auto full = small_valid_gguf();
  std::mt19937 rng(1234);
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    try {
      auto f = parse(b);
      for (const auto& t : f->tensors()) (void)f->tensor(t);
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok, 0);
}

// Header of a file whose only metadata entry is `key` of type `type`; the
// caller appends the value bytes.
Bytes header_with_kv(const std::string& key, GgufType type, uint64_t n_tensors = 0) {
  Bytes b;
  b.u32(0x46554747).u32(3).u64(n_tensors).u64(1).str(key).u32(static_cast<uint32_t>(type));
  return b;
}

TEST(Gguf, HostileCountsAndLengthsFailFast) {
  const auto start = std::chrono::steady_clock::now();
  {  // 2^60 strings in a 1 KB file
    Bytes b = header_with_kv("tokenizer.ggml.tokens", GgufType::ARRAY);
    b.u32(static_cast<uint32_t>(GgufType::STRING)).u64(1ull << 60);
    b.buf.resize(1024);
    expect_error(b.buf, "claims 1152921504606846976 string values");
  }
  {  // 2^62 nested arrays
    Bytes b = header_with_kv("a", GgufType::ARRAY);
    b.u32(static_cast<uint32_t>(GgufType::ARRAY)).u64(1ull << 62);
    b.buf.resize(4096);
    expect_error(b.buf, "metadata 'a' claims");
  }
  {  // string longer than the file
    Bytes b = header_with_kv("s", GgufType::STRING);
    b.u64(UINT64_MAX);
    expect_error(b.buf, "claims a string of 18446744073709551615 bytes");
  }
  {  // key length huge
    Bytes b;
    b.u32(0x46554747).u32(3).u64(0).u64(1).u64(1ull << 50);
    b.buf.resize(200);
    expect_error(b.buf, "metadata entry #0 claims a string");
  }
  {  // metadata count huge
    Bytes b;
    b.u32(0x46554747).u32(3).u64(0).u64(1ull << 62);
    expect_error(b.buf, "4611686018427387904 metadata entries");
  }
  {  // tensor count huge
    Bytes b;
    b.u32(0x46554747).u32(3).u64(UINT64_MAX).u64(0);
    b.buf.resize(1000);
    expect_error(b.buf, "18446744073709551615 tensors");
  }
  {  // bad value type, bad array element type
    Bytes b = header_with_kv("t", static_cast<GgufType>(13));
    expect_error(b.buf, "metadata 't' has unknown value type 13");
    Bytes c = header_with_kv("t", GgufType::ARRAY);
    c.u32(99).u64(0);
    expect_error(c.buf, "array of unknown value type 99");
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(ms, 5000);
}

// Parses ~2M values first, so it is not timed (slow under sanitizers).
TEST(Gguf, ArrayValueBudgetPerFile) {
  {  // many small arrays: the per-file value budget stops them
    Bytes b;
    b.u32(0x46554747).u32(3).u64(0).u64(2);
    for (const char* k : {"x", "y"}) {
      b.str(k).u32(static_cast<uint32_t>(GgufType::ARRAY)).u32(0).u64(kGgufMaxArrayValues / 2 + 1);
      b.buf.resize(b.buf.size() + kGgufMaxArrayValues / 2 + 1);
    }
    expect_error(b.buf, "allowed per file");
  }
}

TEST(Gguf, NestingDepthIsBounded) {
  auto nested = [](int depth) {
    GgufValue v = gv_arr(GgufType::U8, {gv_u(GgufType::U8, 1)});
    for (int i = 1; i < depth; ++i) v = gv_arr(GgufType::ARRAY, {v});
    GgufWriter w;
    w.kv("deep", v);
    return w.build();
  };
  EXPECT_NO_THROW(parse(nested(kGgufMaxArrayDepth)));
  expect_error(nested(kGgufMaxArrayDepth + 1), "nests arrays deeper than 8 levels");
  // Hostile: a chain of arrays each claiming one array element, 100k deep.
  Bytes b = header_with_kv("deep", GgufType::ARRAY);
  for (int i = 0; i < 100000; ++i) b.u32(static_cast<uint32_t>(GgufType::ARRAY)).u64(1);
  expect_error(b.buf, "deeper than");
}

TEST(Gguf, DuplicatesAndEmptyNames) {
  GgufWriter w;
  w.kv("k", gv_u(GgufType::U8, 1)).kv("k", gv_u(GgufType::U8, 2));
  expect_error(w.build(), "duplicate metadata key 'k'");
  GgufWriter t;
  t.tensor("w", {4}, 0, std::vector<uint8_t>(16)).tensor("w", {4}, 0, std::vector<uint8_t>(16));
  expect_error(t.build(), "duplicate tensor 'w'");
  GgufWriter e;
  e.kv("", gv_u(GgufType::U8, 1));
  expect_error(e.build(), "empty key");
  GgufWriter n;
  n.tensor("", {4}, 0, std::vector<uint8_t>(16));
  expect_error(n.build(), "tensor #0 has an empty name");
}

TEST(Gguf, HostileTensorInfos) {
  auto one = [](std::vector<uint64_t> ne, uint32_t type, size_t data = 64) {
    GgufWriter w;
    w.tensor("blk.0.attn_q.weight", std::move(ne), type, std::vector<uint8_t>(data));
    return w;
  };
  expect_error(one({0, 4}, 0).build(), "invalid size 0 in dimension 0");
  expect_error(one({4, 1ull << 63}, 0).build(), "invalid size 9223372036854775808 in dimension 1");
  expect_error(one({1ull << 40, 1ull << 40}, 0).build(), "is too large");
  expect_error(one({256, 1ull << 62}, 14).build(), "is too large");
  expect_error(one({1, 1, 1, 1, 1}, 0).build(), "has 5 dimensions");
  expect_error(one({}, 0).build(), "has 0 dimensions");
  expect_error(one({16}, 8).build(), "rows of 16 values, not a whole number of q8_0 blocks of 32");
  expect_error(one({256}, 10).build(), "has type Q2_K (ggml type 10), which loom does not support");
  expect_error(one({256}, 11).build(), "Q3_K");
  expect_error(one({32}, 9).build(), "Q8_1");
  expect_error(one({32}, 39).build(), "MXFP4");
  expect_error(one({32}, 16).build(), "IQ2_XXS");
  expect_error(one({32}, 26).build(), "I32");
  expect_error(one({32}, 4).build(), "unknown ggml type 4");
  expect_error(one({32}, 1000).build(), "unknown ggml type 1000");
  // Extent past the end of the file, by size and by offset.
  expect_error(one({1000}, 0, 64).build(),
               "tensor 'blk.0.attn_q.weight' extends past the end of the file");
  auto w = one({4}, 0, 16);
  w.tensors[0].offset = UINT64_MAX - 31;  // aligned, and offset + size overflows
  expect_error(w.build(), "extends past the end of the file");
  // Overlap.
  GgufWriter o;
  o.tensor("a", {16}, 0, std::vector<uint8_t>(64)).tensor("b", {16}, 0, std::vector<uint8_t>(64));
  o.tensors[1].offset = 32;
  expect_error(o.build(), "tensors 'a' and 'b' overlap");
  // Names of all ggml types are known.
  EXPECT_EQ(ggml_type_name(10), "Q2_K");
  EXPECT_EQ(ggml_type_name(34), "TQ1_0");
  EXPECT_EQ(ggml_type_name(28), "F64");
  EXPECT_EQ(ggml_type_name(400), "");
}

TEST(Gguf, FileConstructorMapsAndNamesThePath) {
  const auto bytes = small_valid_gguf();
  Tensor t;
  {
    TempFile tmp(bytes);
    auto f = std::make_shared<GgufFile>(tmp.path);
    EXPECT_EQ(f->path(), tmp.path);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 3u);
    t = f->tensor("token_embd.weight");
    EXPECT_EQ(t.owner() != nullptr, true);
  }  // file object and the file on disk are gone; the mapping is not
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(t.data_as<uint8_t>()[47], 1);

  auto bad = bytes;
  bad.resize(bad.size() - 1);
  TempFile trunc(bad, "trunc.gguf");
  try {
    GgufFile f(trunc.path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(trunc.path + ": tensor 'blk.0.attn_q.weight' extends past", 0), 0u)
        << e.what();
  }
  const std::vector<uint8_t> nothing;
  TempFile empty(nothing, "empty.gguf");
  EXPECT_THROW(GgufFile{empty.path}, Error);
  EXPECT_THROW(GgufFile{"/nonexistent/dir/model.gguf"}, Error);
  EXPECT_THROW(GgufFile{std::filesystem::temp_directory_path().string()}, Error);
}

TEST(Gguf, WeightSource) {
  const auto bytes = small_valid_gguf();
  std::shared_ptr<const GgufFile> f = parse(bytes);
  auto w = open_gguf_weights(f);
  EXPECT_EQ(w->names(), (std::vector<std::string>{"token_embd.weight", "blk.0.attn_q.weight"}));
  EXPECT_TRUE(w->find("token_embd.weight").has_value());
  EXPECT_FALSE(w->find("output.weight").has_value());
  EXPECT_EQ(w->get("blk.0.attn_q.weight", {2, 32}).dtype(), DType::Q8_0);
  EXPECT_THROW(w->get("blk.0.attn_q.weight", {32, 2}), Error);
  EXPECT_THROW(w->get("output.weight"), Error);
}

}  // namespace
}  // namespace loom
