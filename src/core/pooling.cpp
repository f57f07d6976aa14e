// PoolingType names and ranges.
#include "core/pooling.h"

namespace loom {

std::string_view pooling_type_name(PoolingType type) {
  switch (type) {
    case PoolingType::Last:
      return "last";
    case PoolingType::Mean:
      return "mean";
    case PoolingType::Cls:
      return "cls";
  }
  return "unknown";
}

std::optional<PoolingType> parse_pooling_type(std::string_view name) {
  if (name == "last") return PoolingType::Last;
  if (name == "mean") return PoolingType::Mean;
  if (name == "cls") return PoolingType::Cls;
  return std::nullopt;
}

PoolingRange pooling_range(PoolingType type, int32_t len) {
  switch (type) {
    case PoolingType::Last:
      return {len - 1, len};
    case PoolingType::Mean:
      return {0, len};
    case PoolingType::Cls:
      return {0, 1};
  }
  return {0, 0};
}

}  // namespace loom
