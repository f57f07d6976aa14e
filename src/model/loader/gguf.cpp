// GGUF reader: parses the header, metadata and tensor infos of a v2/v3 file
// held in memory (usually an mmap), checking every count, length, offset and
// size against the bytes that remain before it is used or allocated from.
#include "model/loader/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "model/loader/mapped_file.h"

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes a little-endian host");

namespace loom {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// Every ggml_type id, in id order; empty names were never used or were removed.
constexpr std::string_view kGgmlTypeNames[] = {
    "F32",     "F16",     "Q4_0",     "Q4_1",    "",           "",           "Q5_0",
    "Q5_1",    "Q8_0",    "Q8_1",     "Q2_K",    "Q3_K",       "Q4_K",       "Q5_K",
    "Q6_K",    "Q8_K",    "IQ2_XXS",  "IQ2_XS",  "IQ3_XXS",    "IQ1_S",      "IQ4_NL",
    "IQ3_S",   "IQ2_S",   "IQ4_XS",   "I8",      "I16",        "I32",        "I64",
    "F64",     "IQ1_M",   "BF16",     "Q4_0_4_4", "Q4_0_4_8",  "Q4_0_8_8",   "TQ1_0",
    "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
};

struct GgmlDType {
  uint32_t id;
  DType dtype;
};
constexpr GgmlDType kSupported[] = {
    {0, DType::F32},   {1, DType::F16},   {30, DType::BF16}, {8, DType::Q8_0},
    {2, DType::Q4_0},  {12, DType::Q4_K}, {13, DType::Q5_K}, {14, DType::Q6_K},
    {3, DType::Q4_1},  {6, DType::Q5_0},  {7, DType::Q5_1},
};

// Smallest encoding of one value of type t, used to bound element counts by
// the bytes left before reserving anything.
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;   // u64 length
    case GgufType::ARRAY: return 12;   // u32 type + u64 count
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}

bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Cursor over the file bytes. Every read checks the bytes left first; failures
// name the file, the offset and what was being read.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& label)
      : data_(data), size_(size), label_(label) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      LOOM_THROW("{}: file is truncated: {} needs {} bytes at offset {}, only {} left", label_, what,
                 n, pos_, remaining());
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const auto len = read<uint64_t>(what);
    if (len > remaining())
      LOOM_THROW("{}: {} claims a string of {} bytes at offset {}, but only {} bytes are left",
                 label_, what, len, pos_ - 8, remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& label_;
};

class MetadataParser {
 public:
  MetadataParser(Reader& r, const std::string& label) : r_(r), label_(label) {}

  GgufValue value(GgufType type, std::string_view what, int depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufType::U8: v.value = uint64_t{r_.read<uint8_t>(what)}; break;
      case GgufType::I8: v.value = int64_t{r_.read<int8_t>(what)}; break;
      case GgufType::U16: v.value = uint64_t{r_.read<uint16_t>(what)}; break;
      case GgufType::I16: v.value = int64_t{r_.read<int16_t>(what)}; break;
      case GgufType::U32: v.value = uint64_t{r_.read<uint32_t>(what)}; break;
      case GgufType::I32: v.value = int64_t{r_.read<int32_t>(what)}; break;
      case GgufType::U64: v.value = uint64_t{r_.read<uint64_t>(what)}; break;
      case GgufType::I64: v.value = int64_t{r_.read<int64_t>(what)}; break;
      case GgufType::F32: v.value = double{r_.read<float>(what)}; break;
      case GgufType::F64: v.value = r_.read<double>(what); break;
      case GgufType::BOOL: v.value = r_.read<uint8_t>(what) != 0; break;
      case GgufType::STRING: v.value = r_.read_string(what); break;
      case GgufType::ARRAY: v.value = array(what, depth + 1); break;
    }
    return v;
  }

 private:
  GgufArray array(std::string_view what, int depth) {
    if (depth > kGgufMaxArrayDepth)
      LOOM_THROW("{}: {} nests arrays deeper than {} levels", label_, what, kGgufMaxArrayDepth);
    const auto raw_type = r_.read<uint32_t>(what);
    if (!valid_type(raw_type))
      LOOM_THROW("{}: {} is an array of unknown value type {}", label_, what, raw_type);
    const auto elem_type = static_cast<GgufType>(raw_type);
    const auto count = r_.read<uint64_t>(what);
    const uint64_t min_bytes = min_value_bytes(elem_type);
    if (count > r_.remaining() / min_bytes)
      LOOM_THROW("{}: {} claims {} {} values, more than the {} bytes left can hold", label_, what,
                 count, gguf_type_name(elem_type), r_.remaining());
    if (count > kGgufMaxArrayValues - total_values_)
      LOOM_THROW("{}: {} has {} array values, more than the {} allowed per file", label_, what,
                 count, kGgufMaxArrayValues);
    total_values_ += count;
    GgufArray a;
    a.elem_type = elem_type;
    a.values.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) a.values.push_back(value(elem_type, what, depth));
    return a;
  }

  Reader& r_;
  const std::string& label_;
  uint64_t total_values_ = 0;
};

[[noreturn]] void wrong_kind(const GgufValue& v, std::string_view wanted) {
  LOOM_THROW("GGUF value is a {}, not {}", gguf_type_name(v.type), wanted);
}

}  // namespace

// ---------------------------------------------------------------- type names

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32",
                                                "i32", "f32",  "bool",   "string", "array",
                                                "u64", "i64",  "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : std::string_view("?");
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  return ggml_type < std::size(kGgmlTypeNames) ? kGgmlTypeNames[ggml_type] : std::string_view();
}

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  for (const auto& s : kSupported)
    if (s.id == ggml_type) return s.dtype;
  return std::nullopt;
}

uint32_t ggml_type_from_dtype(DType dtype) {
  for (const auto& s : kSupported)
    if (s.dtype == dtype) return s.id;
  LOOM_THROW("dtype {} has no GGUF tensor type", dtype_name(dtype));
}

// ---------------------------------------------------------------- values

int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) LOOM_THROW("GGUF value {} does not fit in int64", *u);
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  wrong_kind(*this, "an integer");
}

double GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  wrong_kind(*this, "a number");
}

bool GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  wrong_kind(*this, "a bool");
}

const std::string& GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  wrong_kind(*this, "a string");
}

const GgufArray& GgufValue::as_array() const {
  if (const auto* a = std::get_if<GgufArray>(&value)) return *a;
  wrong_kind(*this, "an array");
}

// ---------------------------------------------------------------- file

GgufFile::GgufFile(const std::string& path) : path_(path) {
  MappedFile m = map_file(path);
  mapping_ = m.owner;
  parse(m.data, m.size);
}

GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::from_memory(const void* data, size_t size, std::string_view label) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::string(label);
  if (data == nullptr && size != 0) LOOM_THROW("{}: null buffer of {} bytes", f->path_, size);
  f->parse(static_cast<const uint8_t*>(data), size);
  return f;
}

void GgufFile::parse(const uint8_t* data, size_t size) {
  base_ = data;
  size_ = size;
  const std::string& label = path_;
  Reader r(data, size, label);

  if (size < 4) LOOM_THROW("{}: not a GGUF file ({} bytes, too short)", label, size);
  const auto magic = r.read<uint32_t>("magic");
  if (magic != kGgufMagic) LOOM_THROW("{}: not a GGUF file (bad magic)", label);
  version_ = r.read<uint32_t>("version");
  if (version_ == 1)
    LOOM_THROW("{}: GGUF v1 is not supported (re-convert the model with a current llama.cpp)", label);
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) LOOM_THROW("{}: big-endian GGUF files are not supported", label);
    LOOM_THROW("{}: unsupported GGUF version {}", label, version_);
  }
  const auto n_tensors = r.read<uint64_t>("tensor count");
  const auto n_kv = r.read<uint64_t>("metadata count");

  // ---- metadata
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, u8 value
  if (n_kv > r.remaining() / kMinKvBytes)
    LOOM_THROW("{}: header claims {} metadata entries, more than the {} bytes left can hold", label,
               n_kv, r.remaining());
  MetadataParser values(r, label);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = fmt::format("metadata entry #{}", i);
    std::string key = r.read_string(where);
    if (key.empty()) LOOM_THROW("{}: {} has an empty key", label, where);
    const std::string what = fmt::format("metadata '{}'", key);
    if (metadata_.count(key)) LOOM_THROW("{}: duplicate metadata key '{}'", label, key);
    const auto raw_type = r.read<uint32_t>(what);
    if (!valid_type(raw_type)) LOOM_THROW("{}: {} has unknown value type {}", label, what, raw_type);
    GgufValue v = values.value(static_cast<GgufType>(raw_type), what, 0);
    metadata_.emplace(std::move(key), std::move(v));
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    if (!is_integer(a->type))
      LOOM_THROW("{}: general.alignment is a {}, not an integer", label, gguf_type_name(a->type));
    const auto* u = std::get_if<uint64_t>(&a->value);
    const auto* s = std::get_if<int64_t>(&a->value);
    const uint64_t align = u ? *u : (*s < 0 ? 0 : static_cast<uint64_t>(*s));
    if (align == 0 || !std::has_single_bit(align))
      LOOM_THROW("{}: general.alignment {} is not a non-zero power of two", label,
                 u ? fmt::format("{}", *u) : fmt::format("{}", *s));
    alignment_ = align;
  }

  // ---- tensor infos
  constexpr uint64_t kMinInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset
  if (n_tensors > r.remaining() / kMinInfoBytes)
    LOOM_THROW("{}: header claims {} tensors, more than the {} bytes left can hold", label,
               n_tensors, r.remaining());
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    info.name = r.read_string(fmt::format("the name of tensor #{}", i));
    if (info.name.empty()) LOOM_THROW("{}: tensor #{} has an empty name", label, i);
    const std::string what = fmt::format("tensor '{}'", info.name);
    if (tensor_index_.count(info.name)) LOOM_THROW("{}: duplicate tensor '{}'", label, info.name);

    const auto n_dims = r.read<uint32_t>(what);
    if (n_dims < 1 || n_dims > static_cast<uint32_t>(kGgufMaxDims))
      LOOM_THROW("{}: {} has {} dimensions (1 to {} allowed)", label, what, n_dims, kGgufMaxDims);
    uint64_t ne[kGgufMaxDims];
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = r.read<uint64_t>(what);
      if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(INT64_MAX))
        LOOM_THROW("{}: {} has invalid size {} in dimension {}", label, what, ne[d], d);
    }
    const auto type_id = r.read<uint32_t>(what);
    const auto dtype = dtype_from_ggml_type(type_id);
    if (!dtype) {
      const std::string_view name = ggml_type_name(type_id);
      if (name.empty()) LOOM_THROW("{}: {} has unknown ggml type {}", label, what, type_id);
      LOOM_THROW("{}: {} has type {} (ggml type {}), which loom does not support", label, what, name,
                 type_id);
    }
    info.dtype = *dtype;
    info.offset = r.read<uint64_t>(what);
    if (info.offset % alignment_ != 0)
      LOOM_THROW("{}: {} has offset {}, not a multiple of the alignment {}", label, what,
                 info.offset, alignment_);

    // Shape outermost first; bytes = row bytes * rows, all checked.
    info.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) info.shape[n_dims - 1 - d] = static_cast<int64_t>(ne[d]);
    const DTypeInfo& ti = dtype_info(info.dtype);
    const auto row_len = static_cast<int64_t>(ne[0]);
    if (row_len % ti.block_elems != 0)
      LOOM_THROW("{}: {} has rows of {} values, not a whole number of {} blocks of {}", label, what,
                 row_len, ti.name, ti.block_elems);
    try {
      int64_t rows = 1;
      for (uint32_t d = 1; d < n_dims; ++d) rows = checked_mul(rows, static_cast<int64_t>(ne[d]));
      info.nbytes = static_cast<uint64_t>(checked_mul(row_bytes(info.dtype, row_len), rows));
    } catch (const Error&) {
      LOOM_THROW("{}: {} of shape {} is too large (size overflow)", label, what, shape_str(info.shape));
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // ---- data section: starts at the next multiple of the alignment
  const uint64_t pos = r.pos();
  const uint64_t pad = (alignment_ - pos % alignment_) % alignment_;
  if (pad > UINT64_MAX - pos) LOOM_THROW("{}: data section offset overflows", label);
  data_offset_ = pos + pad;
  if (tensors_.empty()) return;
  if (data_offset_ > size)
    LOOM_THROW("{}: file is truncated: data section starts at {} but the file has {} bytes", label,
               data_offset_, size);
  const uint64_t data_size = size - data_offset_;
  for (const auto& t : tensors_)
    if (!in_bounds(t.offset, t.nbytes, data_size))
      LOOM_THROW("{}: tensor '{}' extends past the end of the file ({} bytes at data offset {}, "
                 "data section has {})",
                 label, t.name, t.nbytes, t.offset, data_size);

  // No two tensors may share bytes.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (by_offset[i]->offset < prev->offset + prev->nbytes)
      LOOM_THROW("{}: tensors '{}' and '{}' overlap", label, prev->name, by_offset[i]->name);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
template <class F>
auto with_key(const std::string& path, std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    LOOM_THROW("{}: metadata '{}': {}", path, key, e.what());
  }
}
}  // namespace

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(path_, key, [&] { return v->as_int(); }) : fallback;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(path_, key, [&] { return v->as_float(); }) : fallback;
}

std::string GgufFile::get_string(std::string_view key, std::string_view fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(path_, key, [&] { return v->as_string(); }) : std::string(fallback);
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(path_, key, [&] { return v->as_bool(); }) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  return with_key(path_, key, [&] {
    const GgufArray& a = v->as_array();
    if (a.elem_type != GgufType::STRING)
      LOOM_THROW("array of {}, not of strings", gguf_type_name(a.elem_type));
    std::vector<std::string> out;
    out.reserve(a.values.size());
    for (const auto& e : a.values) out.push_back(e.as_string());
    return out;
  });
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  return with_key(path_, key, [&] {
    const GgufArray& a = v->as_array();
    if (!is_integer(a.elem_type) && !is_float(a.elem_type))
      LOOM_THROW("array of {}, not of numbers", gguf_type_name(a.elem_type));
    std::vector<double> out;
    out.reserve(a.values.size());
    for (const auto& e : a.values) out.push_back(e.as_float());
    return out;
  });
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  return with_key(path_, key, [&] {
    const GgufArray& a = v->as_array();
    if (!is_integer(a.elem_type))
      LOOM_THROW("array of {}, not of integers", gguf_type_name(a.elem_type));
    std::vector<int64_t> out;
    out.reserve(a.values.size());
    for (const auto& e : a.values) out.push_back(e.as_int());
    return out;
  });
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::tensor(const GgufTensorInfo& info) const {
  // Use this file's own (bounds-checked) info, whatever copy the caller holds.
  const GgufTensorInfo* own = find_tensor(info.name);
  if (!own) LOOM_THROW("{}: no tensor '{}'", path_, info.name);
  auto* p = const_cast<uint8_t*>(base_ + data_offset_ + own->offset);
  return Tensor(p, own->dtype, own->shape, Device::Cpu, mapping_);
}

Tensor GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (!info) LOOM_THROW("{}: no tensor '{}'", path_, name);
  return tensor(*info);
}

}  // namespace loom
