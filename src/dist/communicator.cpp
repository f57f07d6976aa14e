// The single-process communicator, the default timeout, and the MPI factory's
// fallback when loom is built without MPI.
#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>

namespace loom {

namespace {

std::chrono::milliseconds default_timeout() {
  if (const char* env = std::getenv("LOOM_DIST_TIMEOUT_S")) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (end != env && *end == '\0' && s > 0 && s < 1e7)
      return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return std::chrono::seconds(60);
}

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce_sum(Tensor&) override {}
  void all_gather(const Tensor& in, Tensor& out) override {
    LOOM_CHECK(in.nbytes() == out.nbytes(), "all_gather: {} bytes in, {} out", in.nbytes(),
               out.nbytes());
    LOOM_CHECK(in.device() == Device::Cpu && out.device() == Device::Cpu,
               "single communicator: host tensors only");
    if (in.data() != out.data()) std::memmove(out.data(), in.data(), size_t(in.nbytes()));
  }
  void broadcast(void*, size_t, int root, bool) override {
    LOOM_CHECK(root == 0, "broadcast root {} in a group of one", root);
  }
  void send(const Tensor&, int peer) override {
    LOOM_THROW("send to rank {} in a group of one", peer);
  }
  void recv(Tensor&, int peer) override { LOOM_THROW("recv from rank {} in a group of one", peer); }
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

Communicator::Communicator() : timeout_(default_timeout()) {}

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

#ifndef LOOM_HAVE_MPI
bool mpi_available() {
  return false;
}
std::unique_ptr<Communicator> make_mpi_communicator() {
  LOOM_THROW(
      "this loom was built without MPI (install libopenmpi-dev and configure with -DLOOM_MPI=ON)");
}
std::unique_ptr<Communicator> make_mpi_communicator(int, int) {
  return make_mpi_communicator();  // throws
}
#endif

}  // namespace loom
