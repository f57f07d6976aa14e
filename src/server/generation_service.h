// GenerationService: what the HTTP layer needs from an engine — exactly the
// engine's public API (engine/api.h: submit, abort, stats). loom::Engine is
// one; tests substitute a fake. Every method may be called from any thread;
// callbacks run on the engine's delivery thread and must not block on it.
#pragma once

#include "engine/api.h"

namespace loom::server {

using GenerationService = loom::EngineApi;

}  // namespace loom::server
