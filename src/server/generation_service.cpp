// GenerationService over loom::Engine.
#include "server/generation_service.h"

namespace loom::server {

namespace {
class EngineService : public GenerationService {
 public:
  explicit EngineService(Engine& engine) : engine_(engine) {}
  RequestId submit(Request request, StreamCallback callback) override {
    return engine_.submit(std::move(request), std::move(callback));
  }
  void abort(RequestId id) override { engine_.abort(id); }
  EngineStats stats() const override {
    EngineStats s = engine_.stats();
    s.kv.num_blocks = engine_.num_kv_blocks();  // fixed: known before the first step
    return s;
  }

 private:
  Engine& engine_;
};
}  // namespace

std::unique_ptr<GenerationService> make_engine_service(Engine& engine) {
  return std::make_unique<EngineService>(engine);
}

}  // namespace loom::server
