// Communicator over MPI (MPI_COMM_WORLD, duplicated): CPU tensors and host
// bytes. Errors return instead of aborting (MPI_ERRORS_RETURN), and every
// collective is started non-blocking and polled against a deadline, so a
// dead or stuck peer turns into a DistError naming the operation instead of
// a hang. MPI is initialised with MPI_THREAD_SERIALIZED because the engine
// thread, not main, issues the collectives; it is finalised with the last
// communicator, on the thread that destroys it.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <thread>

#include "core/half.h"
#include "core/logging.h"
#include "dist/communicator.h"

namespace loom {

namespace {

// Elements per MPI call: counts are ints.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

int g_users = 0;  // live MpiCommunicators
bool g_we_initialised = false;
MPI_Op g_sum_bf16 = MPI_OP_NULL;
MPI_Op g_sum_f16 = MPI_OP_NULL;

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_f16(f16_to_f32(a[i]) + f16_to_f32(b[i]));
}

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, size_t(n));
}

// Tag of point-to-point messages (one stream per ordered pair of ranks).
constexpr int kPointToPointTag = 7;

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD duplicated, or split by `color` (ordered by `key`) when
  // `split` is set.
  explicit MpiCommunicator(bool split = false, int color = 0, int key = 0) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        LOOM_THROW("MPI_Init_thread failed");
      g_we_initialised = true;
      if (provided < MPI_THREAD_SERIALIZED)
        LOOM_THROW("this MPI library gives thread level {}, loom needs MPI_THREAD_SERIALIZED",
                   provided);
      MPI_Op_create(&sum_bf16, 1, &g_sum_bf16);
      MPI_Op_create(&sum_f16, 1, &g_sum_f16);
    }
    ++g_users;
    if (split)
      check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm_), "MPI_Comm_split");
    else
      check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiCommunicator() override {
    MPI_Comm_free(&comm_);
    if (--g_users == 0 && g_we_initialised) {
      int finalised = 0;
      MPI_Finalized(&finalised);
      if (!finalised) {
        if (g_sum_bf16 != MPI_OP_NULL) MPI_Op_free(&g_sum_bf16);
        if (g_sum_f16 != MPI_OP_NULL) MPI_Op_free(&g_sum_f16);
        MPI_Finalize();
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce_sum(Tensor& t) override {
    LOOM_CHECK(t.device() == Device::Cpu, "mpi all_reduce_sum: host tensors only");
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    size_t elem = 4;
    switch (t.dtype()) {
      case DType::F32:
        break;
      case DType::BF16:
        type = MPI_UINT16_T, op = g_sum_bf16, elem = 2;
        break;
      case DType::F16:
        type = MPI_UINT16_T, op = g_sum_f16, elem = 2;
        break;
      default:
        LOOM_THROW("all_reduce_sum: dtype {} is not f32, bf16 or f16", dtype_name(t.dtype()));
    }
    auto* p = static_cast<uint8_t*>(t.data());
    for (int64_t done = 0, n = t.numel(); done < n;) {
      const int64_t count = std::min(kMaxChunk, n - done);
      MPI_Request req;
      check(
          MPI_Iallreduce(MPI_IN_PLACE, p + size_t(done) * elem, int(count), type, op, comm_, &req),
          "all_reduce");
      wait(req, "all_reduce", false);
      done += count;
    }
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    LOOM_CHECK(in.device() == Device::Cpu && out.device() == Device::Cpu,
               "mpi all_gather: host tensors only");
    LOOM_CHECK(out.nbytes() == in.nbytes() * size_, "all_gather: {} bytes in, {} out over {} ranks",
               in.nbytes(), out.nbytes(), size_);
    if (in.nbytes() > INT_MAX)
      LOOM_THROW("all_gather of {} bytes per rank is too large", in.nbytes());
    MPI_Request req;
    check(MPI_Iallgather(in.data(), int(in.nbytes()), MPI_BYTE, out.data(), int(in.nbytes()),
                         MPI_BYTE, comm_, &req),
          "all_gather");
    wait(req, "all_gather", false);
  }

  void broadcast(void* data, size_t bytes, int root, bool wait_forever) override {
    LOOM_CHECK(root >= 0 && root < size_, "broadcast root {} in a group of {}", root, size_);
    auto* p = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < bytes;) {
      const size_t count = std::min<size_t>(size_t(kMaxChunk), bytes - done);
      MPI_Request req;
      check(MPI_Ibcast(p + done, int(count), MPI_BYTE, root, comm_, &req), "broadcast");
      wait(req, "broadcast", wait_forever);
      done += count;
    }
  }

  void send(const Tensor& t, int peer) override {
    LOOM_CHECK(t.device() == Device::Cpu, "mpi send: host tensors only");
    point_to_point(const_cast<void*>(t.data()), size_t(t.nbytes()), peer, true);
  }

  void recv(Tensor& t, int peer) override {
    LOOM_CHECK(t.device() == Device::Cpu, "mpi recv: host tensors only");
    point_to_point(t.data(), size_t(t.nbytes()), peer, false);
  }

  void barrier() override {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "barrier");
    wait(req, "barrier", false);
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return; make sure
  }

 private:
  void point_to_point(void* data, size_t bytes, int peer, bool sending) {
    LOOM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{} rank {} from rank {} of {}",
               sending ? "send to" : "recv from", peer, rank_, size_);
    const char* what = sending ? "send" : "recv";
    auto* p = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < bytes;) {
      const size_t count = std::min<size_t>(size_t(kMaxChunk), bytes - done);
      MPI_Request req;
      if (sending)
        check(MPI_Isend(p + done, int(count), MPI_BYTE, peer, kPointToPointTag, comm_, &req), what);
      else
        check(MPI_Irecv(p + done, int(count), MPI_BYTE, peer, kPointToPointTag, comm_, &req), what);
      wait(req, what, false);
      done += count;
    }
  }

  void check(int rc, const char* what) const {
    if (rc != MPI_SUCCESS)
      throw DistError(fmt::format("rank {}: MPI {} failed: {}", rank_, what, mpi_error_text(rc)),
                      __FILE__, __LINE__);
  }

  // Polls `req` until it completes; throws DistError on an MPI error or when
  // timeout() passes first. Spins briefly (a collective between two busy
  // ranks completes in microseconds), then sleeps so an idle wait costs no CPU.
  void wait(MPI_Request& req, const char* what, bool forever) const {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto deadline = start + timeout();
    for (int64_t polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if ((polls & 63) != 0) continue;
      const auto now = clock::now();
      if (!forever && now > deadline)
        throw DistError(
            fmt::format("rank {} of {}: {} did not complete within {:.1f} s: a peer rank "
                        "died or is stuck",
                        rank_, size_, what, timeout().count() / 1000.0),
            __FILE__, __LINE__);
      const auto waited = now - start;
      if (waited > std::chrono::milliseconds(100))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      else if (waited > std::chrono::microseconds(200))
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool mpi_available() {
  return true;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

std::unique_ptr<Communicator> make_mpi_communicator(int color, int key) {
  LOOM_CHECK(color >= 0, "MPI communicator split: color {} is negative", color);
  return std::make_unique<MpiCommunicator>(true, color, key);
}

}  // namespace loom
