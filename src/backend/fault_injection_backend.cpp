// Test-only fault injection around a real backend (see the header).
#include "backend/fault_injection_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/logging.h"

namespace loom {

namespace {

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, std::string command_file)
      : inner_(std::move(inner)), be_(*inner_), command_file_(std::move(command_file)) {}

  Device device() const override { return be_.device(); }
  std::string name() const override { return be_.name(); }
  DType activation_dtype() const override { return be_.activation_dtype(); }

  Tensor alloc(DType dtype, std::vector<int64_t> shape) override {
    return be_.alloc(dtype, std::move(shape));
  }
  Tensor prepare_weight(const Tensor& w) override { return be_.prepare_weight(w); }
  void copy_from_host(Tensor& dst, const void* src, size_t bytes) override {
    be_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override {
    be_.copy_to_host(dst, src, bytes);
  }
  void synchronize() override { be_.synchronize(); }
  void copy(Tensor& dst, const Tensor& src) override { be_.copy(dst, src); }

  void prepare_attention(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                         int64_t num_blocks) override {
    inject();
    be_.prepare_attention(meta, num_tokens, block_size, num_blocks);
  }
  bool supports_capture() const override { return be_.supports_capture(); }
  void begin_capture() override { be_.begin_capture(); }
  std::unique_ptr<StepGraph> end_capture() override { return be_.end_capture(); }
  void abort_capture() override { be_.abort_capture(); }
  bool replay(StepGraph& graph) override { return be_.replay(graph); }

  void embedding(const Tensor& table, const Tensor& ids, float scale, Tensor& out) override {
    be_.embedding(table, ids, scale, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override {
    be_.matmul(x, w, bias, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float weight_offset, Tensor& out,
                const LinearWeight* next_linear = nullptr) override {
    be_.rms_norm(x, w, eps, weight_offset, out, next_linear);
  }
  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& w, float eps,
                    float weight_offset, Tensor& out,
                    const LinearWeight* next_linear = nullptr) override {
    be_.add_rms_norm(x, residual, w, eps, weight_offset, out, next_linear);
  }
  void add(Tensor& a, const Tensor& b) override { be_.add(a, b); }
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, int rotary_dim,
            bool interleaved, float mscale) override {
    be_.rope(x, positions, inv_freq, rotary_dim, interleaved, mscale);
  }
  void gated_activation(const Tensor& gate, const Tensor& up, GatedActivation act,
                        Tensor& out) override {
    be_.gated_activation(gate, up, act, out);
  }
  void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& cache,
                const AttentionMetadata& meta) override {
    be_.write_kv(k, v, cache, meta);
  }
  void paged_attention(const Tensor& q, const KvLayerCache& cache, const AttentionMetadata& meta,
                       const AttentionParams& params, Tensor& out) override {
    be_.paged_attention(q, cache, meta, params, out);
  }
  bool supports_fused_projections() const override { return be_.supports_fused_projections(); }
  void split_qkv(const Tensor& qkv, const QkvRope* rope, Tensor& q, Tensor& k, Tensor& v,
                 KvLayerCache* cache, const AttentionMetadata* meta) override {
    be_.split_qkv(qkv, rope, q, k, v, cache, meta);
  }
  void gated_activation_fused(const Tensor& gate_up, GatedActivation act, Tensor& out,
                              const LinearWeight* next_linear = nullptr) override {
    be_.gated_activation_fused(gate_up, act, out, next_linear);
  }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    be_.gather_rows(x, rows, out);
  }
  void softcap(Tensor& x, float cap) override { be_.softcap(x, cap); }
  void apply_token_bitmask(Tensor& logits, const std::vector<int32_t>& rows,
                           const std::vector<uint32_t>& words) override {
    be_.apply_token_bitmask(logits, rows, words);
  }
  void argmax_rows(const Tensor& logits, std::vector<int32_t>& out) override {
    be_.argmax_rows(logits, out);
  }
  bool has_device_sampler() const override { return be_.has_device_sampler(); }
  bool sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                   const std::vector<LogitEdit>& edits, std::vector<int32_t>& out) override {
    return be_.sample_rows(logits, specs, edits, out);
  }
  void argmax_rows_to(const Tensor& logits, Tensor& ids) override {
    be_.argmax_rows_to(logits, ids);
  }
  bool sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                      const std::vector<LogitEdit>& edits, Tensor& ids) override {
    return be_.sample_rows_to(logits, specs, edits, ids);
  }
  void resolve_token_ids(Tensor& ids, const Tensor& src) override {
    be_.resolve_token_ids(ids, src);
  }
  std::unique_ptr<TokenDownload> download_tokens(const Tensor& ids, int64_t n) override {
    return be_.download_tokens(ids, n);
  }

 private:
  // Reads (and removes) a new command, then applies what is due this step.
  void inject() {
    if (std::ifstream in(command_file_); in) {
      std::string line;
      std::getline(in, line);
      in.close();
      std::remove(command_file_.c_str());
      std::istringstream words(line);
      std::string what;
      words >> what;
      if (what == "throw") {
        int n = 1;
        words >> n;
        throws_left_ = std::max(1, n);
      } else if (what == "stall") {
        double seconds = 0;
        words >> seconds;
        stall_seconds_ = std::max(0.0, seconds);
      } else {
        LOOM_LOG_WARN("fault injection: unknown command '{}' in {}", line, command_file_);
      }
    }
    if (stall_seconds_ > 0) {
      LOOM_LOG_WARN("fault injection: stalling this step for {} s", stall_seconds_);
      std::this_thread::sleep_for(std::chrono::duration<double>(stall_seconds_));
      stall_seconds_ = 0;
    }
    if (throws_left_ > 0) {
      --throws_left_;
      LOOM_LOG_WARN("fault injection: failing this step");
      LOOM_THROW("injected backend fault");
    }
  }

  std::unique_ptr<Backend> inner_;
  Backend& be_;
  std::string command_file_;
  int throws_left_ = 0;
  double stall_seconds_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_fault_injecting_backend(std::unique_ptr<Backend> inner,
                                                      std::string command_file) {
  LOOM_CHECK(inner != nullptr, "fault injection needs a backend to wrap");
  return std::make_unique<FaultInjectingBackend>(std::move(inner), std::move(command_file));
}

}  // namespace loom
