// Communicator: the collectives that tensor and pipeline parallelism need,
// over a fixed group of ranks (one process each). Implementations: a
// single-process one (size 1), MPI (CPU tensors; also the bootstrap of
// NCCL) and NCCL (GPU tensors, built with LOOM_CUDA). Every rank must call
// the same collectives in the same order. A collective that does not finish
// within timeout() throws DistError (a peer died or is stuck); the caller
// then calls abort(), which ends every rank of the job: a half-failed group
// is never reused. Not thread-safe: one thread per process calls it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace loom {

// A collective failed or timed out. The group is unusable afterwards.
class DistError : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "single", "mpi", "nccl"

  // Sums `t` over all ranks, in place (f32, bf16 or f16; same shape on every
  // rank). CPU tensors for mpi, device tensors for nccl.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // out = the ranks' `in` concatenated along the first dimension, rank 0
  // first: out has size() times in's bytes. Same dtype, device rules as
  // all_reduce_sum (any dtype: the data is moved as bytes).
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // Copies `bytes` host bytes at `data` from `root` to every rank. With
  // wait_forever the call has no deadline (a worker waiting for its next
  // command while the server is idle); otherwise timeout() applies.
  virtual void broadcast(void* data, size_t bytes, int root, bool wait_forever = false) = 0;
  // Point-to-point (pipeline parallelism): send() moves `t`'s bytes to rank
  // `peer`, whose matching recv() from this rank fills a tensor of the same
  // byte size. Messages from one rank to another arrive in the order sent;
  // both calls return when their buffer may be reused (mpi) or the transfer
  // is queued on the stream (nccl). Same device rules as all_reduce_sum; any
  // dtype. timeout() applies.
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(Tensor& t, int peer) = 0;
  virtual void barrier() = 0;
  // Ends every process of the job with `exit_code`, now. Never returns.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  // Deadline for each collective (default 60 s, or LOOM_DIST_TIMEOUT_S).
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  Communicator();

 private:
  std::chrono::milliseconds timeout_;
};

// A group of one: collectives are copies or no-ops.
std::unique_ptr<Communicator> make_single_communicator();

// True when this loom was built with MPI (LOOM_MPI).
bool mpi_available();
// True when this process was started by an MPI launcher (mpirun, srun...):
// it looks at the launchers' environment variables, without initialising MPI.
bool launched_by_mpi();
// MPI_COMM_WORLD of this process (MPI is initialised on the first call and
// finalised when the last communicator using it goes). Throws loom::Error
// when loom was built without MPI.
std::unique_ptr<Communicator> make_mpi_communicator();
// The ranks of MPI_COMM_WORLD that pass the same `color` (MPI_Comm_split),
// ordered by `key`: e.g. the tensor-parallel group of one pipeline stage.
// Every rank of the world must call it (a collective).
std::unique_ptr<Communicator> make_mpi_communicator(int color, int key);

}  // namespace loom
