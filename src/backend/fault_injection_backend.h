// FaultInjectingBackend: a Backend that forwards every op to another one and,
// for tests only, fails or stalls a forward step on command. Commands come
// from a file the test writes (and this backend deletes once it has read it),
// looked at once per step (prepare_attention, which every forward step calls
// first), so a test can inject a fault at any moment - in the middle of a
// stream, or on the first step after idle - without a debug build:
//   throw [N]      the next N steps (default 1) throw loom::Error
//   stall SECONDS  the next step sleeps SECONDS first (fractions allowed)
// Enabled only by `loom serve --test-fault-file PATH` (a hidden flag).
// Called from the engine thread only, like any backend.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace loom {

std::unique_ptr<Backend> make_fault_injecting_backend(std::unique_ptr<Backend> inner,
                                                      std::string command_file);

}  // namespace loom
