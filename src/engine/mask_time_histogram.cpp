// MaskTimeHistogram (api.h): log-spaced buckets of per-row mask fill times.
#include <cmath>

#include "engine/api.h"

namespace loom {

double MaskTimeHistogram::bound_seconds(int i) {
  return 1e-6 * std::pow(std::sqrt(2.0), i);
}

void MaskTimeHistogram::observe(double seconds) {
  int i = 0;
  while (i < kNumBounds && seconds > bound_seconds(i)) ++i;
  ++counts[size_t(i)];
  ++count;
  sum_seconds += seconds;
}

}  // namespace loom
