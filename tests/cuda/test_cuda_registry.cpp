// The backend registry in a CUDA build: CUDA is built, and on a GPU
// make_backend gives a CUDA backend whose device_memory() reports its GPU
// (free <= total, and an allocation shows up in the free bytes).
#include <gtest/gtest.h>

#include "backend/registry/registry.h"

namespace loom {
namespace {

TEST(CudaBackendRegistry, CudaIsBuilt) {
  EXPECT_TRUE(backend_built(BackendKind::Cuda));
  EXPECT_TRUE(gpu_environment().built);
}

TEST(CudaBackendRegistry, MakeCudaBackendAndQueryItsMemory) {
  if (!backend_available(BackendKind::Cuda)) GTEST_SKIP() << "no CUDA device visible";
  EXPECT_EQ(choose_backend("auto"), BackendKind::Cuda);
  auto be = make_backend(BackendKind::Cuda, {.gpu_device = 0});
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->device(), Device::Cuda);
  const auto before = be->device_memory();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(before->total_bytes, 0);
  EXPECT_GT(before->free_bytes, 0);
  EXPECT_LE(before->free_bytes, before->total_bytes);
  EXPECT_EQ(static_cast<size_t>(before->total_bytes), gpu_environment().gpus.at(0).memory_total);
  // 1 GiB allocated on the device shows up as less free memory (other
  // processes may allocate too, so only a lower bound on the drop is exact).
  Tensor t = be->alloc(DType::F32, {int64_t{1} << 28});
  be->synchronize();
  const auto after = be->device_memory();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->total_bytes, before->total_bytes);
  EXPECT_LE(after->free_bytes, before->free_bytes - (int64_t{1} << 30) + (int64_t{64} << 20));
}

}  // namespace
}  // namespace loom
