// bench_cuda_ops --read-pattern (read_pattern.cu): DRAM read rate of a weight
// matrix by the tile shape a kernel fetches it in.
#pragma once

namespace loom {

void bench_read_patterns(int iters);

}  // namespace loom
