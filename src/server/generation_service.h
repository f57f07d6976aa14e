// GenerationService: what the HTTP layer needs from an engine. EngineService
// adapts loom::Engine; tests may substitute a fake. Every method may be called
// from any thread; callbacks run on the service's thread and must not block.
#pragma once

#include <memory>

#include "engine/engine.h"

namespace loom::server {

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Throws loom::Error for a request the engine rejects outright.
  virtual RequestId submit(Request request, StreamCallback callback) = 0;
  virtual void abort(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
};

// engine must be started and outlive the service.
std::unique_ptr<GenerationService> make_engine_service(Engine& engine);

}  // namespace loom::server
