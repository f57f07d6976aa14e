// ModelRunner (model_runner.h). Wire format of a command: a fixed header
// {magic, command, payload bytes} broadcast from rank 0, then the payload
// (little-endian host integers; both ends are the same build on the same
// kind of host).
#include "model/model_runner.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/logging.h"
#include "dist/communicator.h"
#include "model/pipeline_parallel.h"

namespace loom {

namespace {

constexpr uint32_t kMagic = 0x4c4f4f4d;  // "LOOM"
constexpr int kDistFailureExitCode = 3;

struct Header {
  uint32_t magic = kMagic;
  uint32_t command = 0;
  uint64_t bytes = 0;
};

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  void get(std::vector<T>& v) {
    const auto n = get<uint64_t>();
    LOOM_CHECK(n <= (in_.size() - pos_) / sizeof(T),
               "step command: {} elements overrun the payload", n);
    v.resize(size_t(n));
    take(v.data(), size_t(n) * sizeof(T));
  }

 private:
  void take(void* dst, size_t n) {
    LOOM_CHECK(n <= in_.size() - pos_, "step command: payload too short");
    if (n == 0) return;  // an empty vector's data() may be null
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

std::vector<uint8_t> encode_step(const StepInput& s) {
  Writer w;
  w.put(s.tokens);
  w.put(s.positions);
  w.put(s.logit_rows);
  w.put(s.hidden_rows);
  w.put(s.attn.num_seqs);
  w.put(s.attn.max_blocks_per_seq);
  w.put(s.attn.query_start);
  w.put(s.attn.context_lens);
  w.put(s.attn.block_tables);
  w.put(s.attn.slot_mapping);
  return std::move(w.out);
}

StepInput decode_step(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  StepInput s;
  r.get(s.tokens);
  r.get(s.positions);
  r.get(s.logit_rows);
  r.get(s.hidden_rows);
  s.attn.num_seqs = r.get<int32_t>();
  s.attn.max_blocks_per_seq = r.get<int32_t>();
  r.get(s.attn.query_start);
  r.get(s.attn.context_lens);
  r.get(s.attn.block_tables);
  r.get(s.attn.slot_mapping);
  return s;
}

}  // namespace

void copy_kv_blocks(Backend& be, const std::vector<KvBlockCopy>& copies, KvCache& cache) {
  for (KvLayerCache& layer : cache.layers)
    for (Tensor* t : {&layer.k, &layer.v})
      for (const KvBlockCopy& c : copies) {
        Tensor dst = t->slice_rows(c.dst, 1);
        be.copy(dst, t->slice_rows(c.src, 1));  // on the device
      }
}

ModelRunner::ModelRunner(Transformer& model, Communicator* comm, PipelineParallel* pipeline)
    : model_(model), comm_(comm), pipeline_(pipeline) {
  LOOM_CHECK(pipeline == nullptr || comm != nullptr, "a pipeline-parallel runner needs its group");
}

int64_t ModelRunner::kv_cache_bytes_per_block(int64_t block_size, DType dtype) const {
  const int64_t own = model_.kv_cache_bytes_per_block(block_size, dtype);
  if (pipeline_ == nullptr) return own;
  return own / model_.config().num_layers * pipeline_->max_stage_layers();
}

Tensor ModelRunner::run_step(const StepInput& step, KvCache& cache) {
  return pipeline_ ? pipeline_->forward(model_, step, cache) : model_.forward(step, cache);
}

ModelRunner::~ModelRunner() {
  if (distributed() && comm_->rank() == 0) shutdown();
}

bool ModelRunner::distributed() const {
  return comm_ != nullptr && comm_->size() > 1;
}

void ModelRunner::fail(const char* what, const std::exception& e) {
  LOOM_LOG_ERROR("rank {} of {}: {} failed: {}", comm_->rank(), comm_->size(), what, e.what());
  std::fprintf(stderr, "loom: rank %d of %d: %s failed: %s; ending the job\n", comm_->rank(),
               comm_->size(), what, e.what());
  std::fflush(stderr);
  comm_->abort(kDistFailureExitCode);
  std::_Exit(kDistFailureExitCode);  // abort() does not return; the compiler cannot see it
}

void ModelRunner::send(Command command, const std::vector<uint8_t>& payload) {
  LOOM_CHECK(comm_->rank() == 0, "only rank 0 sends step commands");
  LOOM_CHECK(!stopped_, "the workers were already stopped");
  try {
    Header h;
    h.command = uint32_t(command);
    h.bytes = payload.size();
    comm_->broadcast(&h, sizeof(h), 0);
    if (!payload.empty()) comm_->broadcast(const_cast<uint8_t*>(payload.data()), payload.size(), 0);
  } catch (const DistError& e) {
    fail("sending a step command", e);
  }
}

KvCache ModelRunner::allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) {
  if (distributed()) {
    Writer w;
    w.put(num_blocks);
    w.put(block_size);
    w.put(dtype);
    send(Command::AllocateKv, w.out);
  }
  return model_.allocate_kv_cache(num_blocks, block_size, dtype);
}

void ModelRunner::copy_blocks(const std::vector<KvBlockCopy>& copies, KvCache& cache) {
  if (copies.empty()) return;
  if (distributed()) {
    Writer w;
    w.put(copies);
    send(Command::CopyBlocks, w.out);
  }
  copy_kv_blocks(model_.backend(), copies, cache);
}

Tensor ModelRunner::forward(const StepInput& step, KvCache& cache) {
  if (pipeline_ && !step.hidden_rows.empty())
    LOOM_THROW("pooling (hidden states) is not supported with pipeline parallelism");
  if (!distributed()) return model_.forward(step, cache);
  send(Command::Forward, encode_step(step));
  try {
    return run_step(step, cache);
  } catch (const DistError& e) {
    fail("a forward step", e);
  }
}

void ModelRunner::shutdown() {
  if (!distributed() || comm_->rank() != 0 || stopped_) return;
  send(Command::Stop, {});
  stopped_ = true;
}

void ModelRunner::serve_worker() {
  LOOM_CHECK(distributed() && comm_->rank() != 0, "serve_worker runs on ranks other than 0");
  KvCache cache;
  std::vector<uint8_t> payload;
  for (;;) {
    Header h;
    try {
      comm_->broadcast(&h, sizeof(h), 0, /*wait_forever=*/true);
      if (h.magic != kMagic)
        LOOM_THROW("bad step command header from rank 0 (magic {:#x})", h.magic);
      payload.resize(size_t(h.bytes));
      if (h.bytes > 0) comm_->broadcast(payload.data(), payload.size(), 0);
    } catch (const std::exception& e) {
      fail("receiving a step command", e);
    }
    Reader r(payload);
    switch (Command(h.command)) {
      case Command::Stop:
        return;
      case Command::AllocateKv: {
        const auto blocks = r.get<int64_t>();
        const auto block_size = r.get<int64_t>();
        const auto dtype = r.get<DType>();
        cache = model_.allocate_kv_cache(blocks, block_size, dtype);
        break;
      }
      case Command::CopyBlocks: {
        std::vector<KvBlockCopy> copies;
        r.get(copies);
        copy_kv_blocks(model_.backend(), copies, cache);
        break;
      }
      case Command::Forward: {
        const StepInput step = decode_step(payload);
        try {
          run_step(step, cache);
        } catch (const DistError& e) {
          fail("a forward step", e);
        } catch (const Error& e) {
          // Rank 0 runs the same checks on the same step and fails the same
          // way, before any collective: keep serving.
          LOOM_LOG_WARN("rank {}: step failed: {}", comm_->rank(), e.what());
        }
        break;
      }
      default:
        fail("decoding a step command", Error(fmt::format("unknown command {}", h.command)));
    }
  }
}

}  // namespace loom
