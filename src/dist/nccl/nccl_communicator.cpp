// NcclCommunicator: tensor collectives through NCCL, host traffic through the
// bootstrap (MPI) communicator. A collective is enqueued on the backend's
// stream and followed by a CUDA event; the watchdog thread polls the oldest
// pending event and ncclCommGetAsyncError, and past the deadline aborts the
// NCCL communicator and exits the process (mpirun then ends the job).
#include "dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/logging.h"

namespace loom {

namespace {

constexpr int kWatchdogExitCode = 3;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) LOOM_THROW("{}: {}", what, cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    default:
      LOOM_THROW("all_reduce_sum: dtype {} is not f32, bf16 or f16", dtype_name(t));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device, void* stream)
      : boot_(std::move(bootstrap)), device_(device), stream_(static_cast<cudaStream_t>(stream)) {
    set_timeout(boot_->timeout());
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (boot_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    boot_->broadcast(&id, sizeof(id), 0);
    watchdog_ = std::thread([this] { watch(); });
    // Init blocks until every rank joins: guarded like a collective.
    const uint64_t ticket = push_host("NCCL communicator set-up");
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRank(&comm, boot_->size(), id, boot_->rank()), "ncclCommInitRank");
    {
      std::lock_guard<std::mutex> lk(mu_);
      comm_ = comm;  // the watchdog reads it under mu_
    }
    finish_host(ticket);
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    for (auto& p : pending_)
      if (p.event) cudaEventDestroy(p.event);
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return boot_->rank(); }
  int size() const override { return boot_->size(); }
  std::string name() const override { return "nccl"; }

  void all_reduce_sum(Tensor& t) override {
    LOOM_CHECK(t.device() == Device::Cuda, "nccl all_reduce_sum: device tensors only");
    check_nccl(ncclAllReduce(t.data(), t.data(), size_t(t.numel()), nccl_type(t.dtype()), ncclSum,
                             comm_, stream_),
               "ncclAllReduce");
    push_event("all_reduce");
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    LOOM_CHECK(in.device() == Device::Cuda && out.device() == Device::Cuda,
               "nccl all_gather: device tensors only");
    LOOM_CHECK(out.nbytes() == in.nbytes() * size(),
               "all_gather: {} bytes in, {} out over {} ranks", in.nbytes(), out.nbytes(), size());
    check_nccl(ncclAllGather(in.data(), out.data(), size_t(in.nbytes()), ncclUint8, comm_, stream_),
               "ncclAllGather");
    push_event("all_gather");
  }

  void send(const Tensor& t, int peer) override {
    LOOM_CHECK(t.device() == Device::Cuda, "nccl send: device tensors only");
    LOOM_CHECK(peer >= 0 && peer < size() && peer != rank(), "send to rank {} from rank {} of {}",
               peer, rank(), size());
    check_nccl(ncclSend(t.data(), size_t(t.nbytes()), ncclUint8, peer, comm_, stream_), "ncclSend");
    push_event("send");
  }

  void recv(Tensor& t, int peer) override {
    LOOM_CHECK(t.device() == Device::Cuda, "nccl recv: device tensors only");
    LOOM_CHECK(peer >= 0 && peer < size() && peer != rank(), "recv from rank {} on rank {} of {}",
               peer, rank(), size());
    check_nccl(ncclRecv(t.data(), size_t(t.nbytes()), ncclUint8, peer, comm_, stream_), "ncclRecv");
    push_event("recv");
  }

  void broadcast(void* data, size_t bytes, int root, bool wait_forever) override {
    boot_->set_timeout(timeout());
    boot_->broadcast(data, bytes, root, wait_forever);
  }
  void barrier() override {
    boot_->set_timeout(timeout());
    boot_->barrier();
  }
  [[noreturn]] void abort(int exit_code) override {
    if (comm_) ncclCommAbort(comm_);
    boot_->abort(exit_code);
    std::_Exit(exit_code);  // abort() does not return; the compiler cannot see it
  }

 private:
  struct Pending {
    uint64_t ticket = 0;
    cudaEvent_t event = nullptr;  // null: a host-side wait (finish_host ends it)
    const char* what = "";
    std::chrono::steady_clock::time_point since;
  };

  void check_nccl(ncclResult_t rc, const char* what) const {
    if (rc != ncclSuccess)
      throw DistError(
          fmt::format("rank {}: {} failed: {}", boot_->rank(), what, ncclGetErrorString(rc)),
          __FILE__, __LINE__);
  }

  void push_event(const char* what) {
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(ev, stream_), "cudaEventRecord");
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({next_ticket_++, ev, what, std::chrono::steady_clock::now()});
  }

  uint64_t push_host(const char* what) {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({next_ticket_, nullptr, what, std::chrono::steady_clock::now()});
    return next_ticket_++;
  }

  void finish_host(uint64_t ticket) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
      if (it->ticket == ticket) {
        pending_.erase(it);
        return;
      }
  }

  [[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "loom: rank %d of %d: %s\n", boot_->rank(), boot_->size(),
                 message.c_str());
    std::fflush(stderr);
    if (comm_) ncclCommAbort(comm_);
    std::_Exit(kWatchdogExitCode);
  }

  // Watchdog thread: retires completed events in order; fails on an NCCL
  // async error or a collective older than timeout().
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lk(mu_);
    while (!stopping_) {
      cv_.wait_for(lk, std::chrono::milliseconds(50));
      while (!pending_.empty() && pending_.front().event &&
             cudaEventQuery(pending_.front().event) == cudaSuccess) {
        cudaEventDestroy(pending_.front().event);
        pending_.pop_front();
      }
      if (comm_) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
          fail(fmt::format("NCCL reported an asynchronous error: {}", ncclGetErrorString(async)));
      }
      const auto now = std::chrono::steady_clock::now();
      for (const Pending& p : pending_)
        if (now - p.since > timeout())
          fail(fmt::format("NCCL {} did not complete within {:.1f} s: a peer rank died or is stuck",
                           p.what, timeout().count() / 1000.0));
    }
  }

  std::unique_ptr<Communicator> boot_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  uint64_t next_ticket_ = 1;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap,
                                                     int device, void* stream) {
  if (!bootstrap) LOOM_THROW("make_nccl_communicator: no bootstrap communicator");
  return std::make_unique<NcclCommunicator>(std::move(bootstrap), device, stream);
}

}  // namespace loom
