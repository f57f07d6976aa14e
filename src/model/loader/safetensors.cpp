// safetensors reader: bounded header, JSON parsed with limits, every tensor's
// extent checked with overflow-safe arithmetic before a Tensor views it.
#include "model/loader/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "model/loader/bounded_json.h"
#include "model/loader/mapped_file.h"

static_assert(std::endian::native == std::endian::little, "safetensors reader assumes a little-endian host");

namespace loom {
namespace {

struct StDType {
  std::string_view name;
  DType dtype;
};
constexpr StDType kDTypes[] = {
    {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
    {"I8", DType::I8},   {"I32", DType::I32}, {"I64", DType::I64},
    {"F8_E4M3", DType::F8_E4M3},
};

// Reads a non-negative JSON integer or fails naming `what`.
uint64_t json_uint(const nlohmann::json& j, const std::string& label, const std::string& what) {
  if (!j.is_number_unsigned()) LOOM_THROW("{}: {} is not a non-negative integer", label, what);
  return j.get<uint64_t>();
}

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view dtype) {
  for (const auto& d : kDTypes)
    if (d.name == dtype) return d.dtype;
  return std::nullopt;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  MappedFile m = map_file(path);
  mapping_ = m.owner;
  parse(m.data, m.size);
}

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const void* data, size_t size,
                                                              std::string_view label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::string(label);
  if (data == nullptr && size != 0) LOOM_THROW("{}: null buffer of {} bytes", f->path_, size);
  f->parse(static_cast<const uint8_t*>(data), size);
  return f;
}

void SafetensorsFile::parse(const uint8_t* data, size_t size) {
  base_ = data;
  size_ = size;
  const std::string& label = path_;
  if (size < 8) LOOM_THROW("{}: not a safetensors file ({} bytes, too short for the header length)", label, size);
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kSafetensorsMaxHeaderBytes)
    LOOM_THROW("{}: header of {} bytes is larger than the {} allowed", label, header_len,
               kSafetensorsMaxHeaderBytes);
  if (header_len > size - 8)
    LOOM_THROW("{}: file is truncated: header of {} bytes but only {} follow", label, header_len, size - 8);
  if (header_len < 2 || data[8] != '{') LOOM_THROW("{}: header is not a JSON object", label);
  data_offset_ = 8 + header_len;
  const uint64_t data_size = size - data_offset_;

  // Depth 3 is what the format needs: top object > tensor entry > shape array.
  const std::string_view text(reinterpret_cast<const char*>(data + 8), static_cast<size_t>(header_len));
  const nlohmann::json header = parse_bounded_json(text, label, JsonLimits{3, 1u << 22});
  if (!header.is_object()) LOOM_THROW("{}: header is not a JSON object", label);

  tensors_.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form string map; not used
    const std::string what = fmt::format("tensor '{}'", name);
    if (name.empty()) LOOM_THROW("{}: tensor with an empty name", label);
    if (!entry.is_object()) LOOM_THROW("{}: {} is not a JSON object", label, what);
    for (const auto& [k, v] : entry.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        LOOM_THROW("{}: {} has unexpected field '{}'", label, what, k);
    if (!entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      LOOM_THROW("{}: {} needs dtype, shape and data_offsets", label, what);

    SafetensorsTensorInfo info;
    info.name = name;
    const auto& jdtype = entry["dtype"];
    if (!jdtype.is_string()) LOOM_THROW("{}: {} has a dtype that is not a string", label, what);
    const auto dtype = dtype_from_safetensors(jdtype.get<std::string>());
    if (!dtype)
      LOOM_THROW("{}: {} has dtype {}, which loom does not support (F32, F16, BF16, F8_E4M3, I8, I32, I64)",
                 label, what, jdtype.get<std::string>());
    info.dtype = *dtype;

    const auto& jshape = entry["shape"];
    if (!jshape.is_array()) LOOM_THROW("{}: {} has a shape that is not an array", label, what);
    if (jshape.size() > static_cast<size_t>(kSafetensorsMaxDims))
      LOOM_THROW("{}: {} has {} dimensions (at most {} allowed)", label, what, jshape.size(),
                 kSafetensorsMaxDims);
    int64_t numel = 1;
    for (const auto& d : jshape) {
      const uint64_t dim = json_uint(d, label, what + " shape entry");
      if (dim > static_cast<uint64_t>(INT64_MAX)) LOOM_THROW("{}: {} has dimension {} too large", label, what, dim);
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    try {
      for (int64_t d : info.shape) numel = checked_mul(numel, d);
      info.nbytes = static_cast<uint64_t>(checked_mul(numel, dtype_info(info.dtype).block_bytes));
    } catch (const Error&) {
      LOOM_THROW("{}: {} of shape {} is too large (size overflow)", label, what, shape_str(info.shape));
    }

    const auto& joff = entry["data_offsets"];
    if (!joff.is_array() || joff.size() != 2)
      LOOM_THROW("{}: {} needs data_offsets [begin, end]", label, what);
    const uint64_t begin = json_uint(joff[0], label, what + " data_offsets[0]");
    const uint64_t end = json_uint(joff[1], label, what + " data_offsets[1]");
    if (end < begin) LOOM_THROW("{}: {} has data_offsets [{}, {}] with end before begin", label, what, begin, end);
    if (end - begin != info.nbytes)
      LOOM_THROW("{}: {} of {} {} needs {} bytes but data_offsets [{}, {}] hold {}", label, what,
                 dtype_info(info.dtype).name, shape_str(info.shape), info.nbytes, begin, end, end - begin);
    if (end > data_size)
      LOOM_THROW("{}: {} extends past the end of the file (data_offsets end {}, data section has {} bytes)",
                 label, what, end, data_size);
    info.offset = begin;
    index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // No two tensors may share bytes (empty tensors share nothing).
  std::vector<const SafetensorsTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_)
    if (t.nbytes) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (by_offset[i]->offset < prev->offset + prev->nbytes)
      LOOM_THROW("{}: tensors '{}' and '{}' overlap", label, prev->name, by_offset[i]->name);
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::tensor(const SafetensorsTensorInfo& info) const {
  const SafetensorsTensorInfo* own = find_tensor(info.name);  // the checked copy
  if (!own) LOOM_THROW("{}: no tensor '{}'", path_, info.name);
  auto* p = const_cast<uint8_t*>(base_ + data_offset_ + own->offset);
  return Tensor(p, own->dtype, own->shape, Device::Cpu, mapping_);
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensorInfo* info = find_tensor(name);
  if (!info) LOOM_THROW("{}: no tensor '{}'", path_, name);
  return tensor(*info);
}

}  // namespace loom
