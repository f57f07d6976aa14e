// The backend registry: what make_backend and choose_backend give in this
// build (CPU only, or with CUDA), the CPU backend's memory query, and the
// device communicator of a CPU backend (the host group itself). The CUDA side
// on a GPU: tests/cuda/test_cuda_registry.cpp.
#include <gtest/gtest.h>

#include "backend/registry/registry.h"
#include "core/error.h"

namespace loom {
namespace {

TEST(BackendRegistry, CpuIsAlwaysBuiltAndAvailable) {
  EXPECT_TRUE(backend_built(BackendKind::Cpu));
  EXPECT_TRUE(backend_available(BackendKind::Cpu));
  EXPECT_EQ(backend_kind_name(BackendKind::Cpu), "cpu");
  EXPECT_EQ(backend_kind_name(BackendKind::Cuda), "cuda");
  // Available implies built.
  if (backend_available(BackendKind::Cuda)) {
    EXPECT_TRUE(backend_built(BackendKind::Cuda));
  }
}

TEST(BackendRegistry, ChooseBackend) {
  EXPECT_EQ(choose_backend("cpu"), BackendKind::Cpu);
  const bool gpu = backend_available(BackendKind::Cuda);
  EXPECT_EQ(choose_backend("auto"), gpu ? BackendKind::Cuda : BackendKind::Cpu);
  if (gpu) {
    EXPECT_EQ(choose_backend("cuda"), BackendKind::Cuda);
  } else {
    try {
      choose_backend("cuda");
      ADD_FAILURE() << "choose_backend(\"cuda\") without a usable GPU did not throw";
    } catch (const Error& e) {
      const std::string why = e.what();
      EXPECT_NE(
          why.find(backend_built(BackendKind::Cuda) ? "no usable CUDA GPU" : "built without CUDA"),
          std::string::npos)
          << why;
    }
  }
  EXPECT_THROW(choose_backend("tpu"), Error);
  EXPECT_THROW(choose_backend(""), Error);
}

TEST(BackendRegistry, MakeCpuBackend) {
  auto be = make_backend(BackendKind::Cpu, {.cpu_threads = 2});
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->device(), Device::Cpu);
  EXPECT_FALSE(be->device_memory().has_value());  // host memory: no device budget
  // It computes: a += b.
  Tensor a = be->alloc(DType::F32, {3});
  Tensor b = be->alloc(DType::F32, {3});
  const float av[] = {1, 2, 3}, bv[] = {10, 20, 30};
  be->copy_from_host(a, av, sizeof av);
  be->copy_from_host(b, bv, sizeof bv);
  be->add(a, b);
  float out[3] = {};
  be->copy_to_host(out, a, sizeof out);
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[1], 22);
  EXPECT_EQ(out[2], 33);
}

TEST(BackendRegistry, UnbuiltOrUnavailableBackendThrows) {
  if (backend_available(BackendKind::Cuda)) GTEST_SKIP() << "a usable GPU is visible";
  EXPECT_THROW(make_backend(BackendKind::Cuda), Error);
}

TEST(BackendRegistry, GpuEnvironmentMatchesTheBuild) {
  const GpuEnvironment env = gpu_environment();
  EXPECT_EQ(env.built, backend_built(BackendKind::Cuda));
  if (!env.built) {
    EXPECT_TRUE(env.gpus.empty());
    EXPECT_EQ(env.driver_version, 0);
    EXPECT_TRUE(env.build_archs.empty());
  } else {
    EXPECT_FALSE(env.build_archs.empty());
    if (backend_available(BackendKind::Cuda)) {
      EXPECT_FALSE(env.gpus.empty());
    }
  }
}

TEST(BackendRegistry, CpuDeviceCommunicatorIsTheHostGroup) {
  auto be = make_backend(BackendKind::Cpu, {.cpu_threads = 1});
  auto host = make_single_communicator();
  Communicator* raw = host.get();
  auto comm = make_device_communicator(*be, std::move(host), 0);
  EXPECT_EQ(comm.get(), raw);
  EXPECT_EQ(comm->size(), 1);
}

}  // namespace
}  // namespace loom
