// CudaBackend: the Backend interface on one NVIDIA GPU. Activations, weights
// and the KV cache are bf16 (vectors such as norm weights, biases and rope
// frequencies f32); all math accumulates in f32. Every op is queued on the
// backend's own stream and returns at once; copy_to_host and synchronize()
// wait. Shapes, dtypes and host-visible indices are checked here, before any
// launch; kernels trust what they are given.
//
// This file: the stream, memory, step preparation, CUDA graphs, timing marks, and the
// public entry points of cuda_backend.h; the ops live in cuda_backend_*.cpp
// (see cuda_backend_impl.h).
#include "backend/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/weight_upload.h"

namespace loom::cuda {
namespace {

// copy_from_host goes through pinned memory up to this many bytes.
constexpr size_t kStagedCopyMax = size_t{4} << 20;

}  // namespace

OwnedStream::OwnedStream(int device) {
  int count = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&count));
  LOOM_CHECK(device >= 0 && device < count, "CUDA device {} does not exist ({} visible)", device,
             count);
  LOOM_CUDA_CHECK(cudaSetDevice(device));
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

OwnedStream::~OwnedStream() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

CudaBackend::CudaBackend(int device)
    : owned_stream_(device), stream_(owned_stream_.get()), device_(device) {
  check_cuda_device_supported(device);
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
  gemm_ = std::make_unique<Gemm>(stream_);
  // LOOM_FLASH_PREFILL=0: prefill tokens use the CUDA-core kernel too (A/B comparisons).
  const char* flash = std::getenv("LOOM_FLASH_PREFILL");
  flash_prefill_ = !(flash && std::strcmp(flash, "0") == 0);
  attn_split_ = attention_split_from_env();
  // GEMVs start loading weights while the kernel before them runs (sm_90+;
  // LOOM_PDL=0: off, for A/B comparisons).
  const char* pdl = std::getenv("LOOM_PDL");
  set_programmatic_launch(props_.major >= 9 && !(pdl && std::strcmp(pdl, "0") == 0));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  for (DownloadSlot& d : download_slots_) {
    if (d.done) cudaEventDestroy(d.done);
    if (d.host) cudaFreeHost(d.host);
  }
}

std::string CudaBackend::name() const {
  return fmt::format("cuda:{} ({}, sm_{}{}, {} SMs, {:.0f} GiB)", device_, props_.name,
                     props_.major, props_.minor, props_.multiProcessorCount,
                     static_cast<double>(props_.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

Tensor CudaBackend::alloc(DType dtype, std::vector<int64_t> shape) {
  Tensor t(nullptr, dtype, std::move(shape), Device::Cuda);
  const auto bytes = static_cast<size_t>(t.nbytes());
  auto mem = cuda::device_alloc(bytes);
  if (bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(mem.get(), 0, bytes, stream_));
  return Tensor(mem.get(), dtype, t.shape(), Device::Cuda, mem);
}

cuda::WeightStager& CudaBackend::weight_stager() {
  if (!weight_stager_)
    weight_stager_ = std::make_unique<cuda::WeightStager>(cuda::weight_stager_threads());
  return *weight_stager_;
}

Tensor CudaBackend::prepare_weight(const Tensor& host_weight) {
  if (host_weight.device() == Device::Cuda) return host_weight;
  return cuda::upload_weight(host_weight, stream_, &weight_stager());
}

void CudaBackend::copy_from_host(Tensor& dst, const void* src, size_t bytes) {
  LOOM_CHECK(dst.device() == Device::Cuda, "copy_from_host destination must be on the GPU");
  LOOM_CHECK(bytes <= static_cast<size_t>(dst.nbytes()), "copy of {} bytes into a {}-byte tensor",
             bytes, dst.nbytes());
  if (bytes == 0) return;
  check_not_capturing("copy_from_host");
  if (bytes <= kStagedCopyMax)
    uploader_.upload(dst.data(), src, bytes, stream_);
  else
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const Tensor& src, size_t bytes) {
  LOOM_CHECK(src.device() == Device::Cuda, "copy_to_host source must be on the GPU");
  LOOM_CHECK(bytes <= static_cast<size_t>(src.nbytes()), "copy of {} bytes from a {}-byte tensor",
             bytes, src.nbytes());
  check_not_capturing("copy_to_host");
  if (bytes)
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::optional<Backend::DeviceMemory> CudaBackend::device_memory() const {
  // cudaMemGetInfo reports on the calling thread's current device.
  int previous = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&previous));
  LOOM_CUDA_CHECK(cudaSetDevice(device_));
  size_t free_b = 0, total_b = 0;
  const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
  LOOM_CUDA_CHECK(cudaSetDevice(previous));
  LOOM_CUDA_CHECK(err);
  return DeviceMemory{static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

void CudaBackend::prepare_attention(const AttentionMetadata& meta, int64_t num_tokens,
                                    int64_t block_size, int64_t num_blocks) {
  check_not_capturing("prepare_attention");
  weight_stager_.reset();  // the model is loaded: its pinned buffers and threads go
  metadata_.prepare(meta, num_tokens, block_size, num_blocks, stream_);
}

void CudaBackend::begin_capture() {
  check_not_capturing("begin_capture");
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  metadata_.set_frozen(true);
  capture_reallocations_ = cuda::DeviceBuffer::reallocations();
}

std::unique_ptr<StepGraph> CudaBackend::end_capture() {
  LOOM_CHECK(capturing_, "end_capture without begin_capture");
  capturing_ = false;
  metadata_.set_frozen(false);
  cudaGraph_t graph = nullptr;
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  auto g = std::make_unique<CudaStepGraph>();
  const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  LOOM_CUDA_CHECK(err);
  LOOM_CHECK(cuda::DeviceBuffer::reallocations() == capture_reallocations_,
             "device memory was reallocated while a step was being recorded");
  g->reallocations = capture_reallocations_;
  return g;
}

void CudaBackend::abort_capture() {
  if (!capturing_) return;
  capturing_ = false;
  metadata_.set_frozen(false);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // clear the capture's error state
}

bool CudaBackend::replay(StepGraph& graph) {
  check_not_capturing("replay");
  auto* g = dynamic_cast<CudaStepGraph*>(&graph);
  LOOM_CHECK(g != nullptr && g->exec != nullptr, "replay: not a CUDA graph of this backend");
  if (g->reallocations != cuda::DeviceBuffer::reallocations()) return false;
  LOOM_CUDA_CHECK(cudaGraphLaunch(g->exec, stream_));
  return true;
}

namespace {
// A timing event recorded on the stream; destroying it before the device
// reaches it is allowed (CUDA frees it once it completes).
struct EventMark final : Backend::TimingMark {
  cudaEvent_t event = nullptr;
  ~EventMark() override {
    if (event) cudaEventDestroy(event);
  }
};
// Whether the device has passed `e` (cudaEventQuery never waits).
bool passed(cudaEvent_t e) {
  const cudaError_t st = cudaEventQuery(e);
  if (st == cudaErrorNotReady) return false;
  LOOM_CUDA_CHECK(st);
  return true;
}
}  // namespace

std::unique_ptr<Backend::TimingMark> CudaBackend::mark_time() {
  check_not_capturing("mark_time");
  auto m = std::make_unique<EventMark>();
  LOOM_CUDA_CHECK(cudaEventCreate(&m->event));
  LOOM_CUDA_CHECK(cudaEventRecord(m->event, stream_));
  return m;
}

std::optional<double> CudaBackend::seconds_between(const TimingMark& from, const TimingMark& to) {
  const auto* a = dynamic_cast<const EventMark*>(&from);
  const auto* b = dynamic_cast<const EventMark*>(&to);
  LOOM_CHECK(a && b && a->event && b->event, "seconds_between: marks of another backend");
  if (!passed(b->event) || !passed(a->event)) return std::nullopt;
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, a->event, b->event));
  return double(ms) * 1e-3;
}

// A device pointer to t's data: t itself when on the GPU, else an upload of
// it into `buf` (stream-ordered, so buf may be reused by the next op).

const void* CudaBackend::device_view(const Tensor& t, DeviceBuffer& buf) {
  if (t.device() == Device::Cuda) return t.data();
  check_not_capturing("a host tensor argument");
  const auto bytes = static_cast<size_t>(t.nbytes());
  void* d = buf.ensure(std::max<size_t>(bytes, 16), stream_);
  uploader_.upload(d, t.data(), bytes, stream_);
  return d;
}

}  // namespace loom::cuda

namespace loom {

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

void* cuda_backend_stream(Backend& backend) {
  auto* cb = dynamic_cast<cuda::CudaBackend*>(&backend);
  LOOM_CHECK(cb != nullptr, "not a CUDA backend: {}", backend.name());
  return static_cast<void*>(cb->stream());
}

uint64_t cuda_backend_fp8_prequantized(Backend& backend) {
  auto* cb = dynamic_cast<cuda::CudaBackend*>(&backend);
  LOOM_CHECK(cb != nullptr, "not a CUDA backend: {}", backend.name());
  return cb->fp8_prequantized();
}

}  // namespace loom
