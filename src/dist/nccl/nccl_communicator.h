// The NCCL communicator (GPU tensors). Only builds configured with
// -DLOOM_CUDA=ON and MPI compile and link this; its one user is the backend
// registry (make_device_communicator in backend/registry).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace loom {

// A communicator whose tensor collectives run through NCCL on `stream` (a
// cudaStream_t as void*, e.g. cuda_backend_stream()) of GPU `device`. The
// `bootstrap` group (MPI) hands out the NCCL unique id and carries host
// broadcasts and barriers; it is owned by the result. Collectives are
// asynchronous on the stream; a watchdog thread ends the process (exit code
// 3, one clear line on stderr) when one has not completed within timeout()
// or NCCL reports an asynchronous error, so a dead peer never hangs the job.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap,
                                                     int device, void* stream);

}  // namespace loom
