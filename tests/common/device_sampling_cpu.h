// A CPU backend with a stand-in device sampler (a deterministic function of
// the edited row and the spec's uniform), so the engine's async path runs
// sampled rows on the CPU too. For engine tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace loom::testing_util {

class DeviceSamplingCpu final : public Backend {
 public:
  explicit DeviceSamplingCpu(Backend& cpu) : b_(cpu) {}
  Device device() const override { return b_.device(); }
  std::string name() const override { return "cpu+test-sampler"; }
  Tensor alloc(DType dtype, std::vector<int64_t> shape) override { return b_.alloc(dtype, std::move(shape)); }
  Tensor prepare_weight(const Tensor& w) override { return b_.prepare_weight(w); }
  void copy_from_host(Tensor& dst, const void* src, size_t bytes) override { b_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const Tensor& src, size_t bytes) override { b_.copy_to_host(dst, src, bytes); }
  void embedding(const Tensor& t, const Tensor& ids, float scale, Tensor& out) override {
    b_.embedding(t, ids, scale, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override { b_.matmul(x, w, bias, out); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float off, Tensor& out,
                const LinearWeight* next = nullptr) override {
    b_.rms_norm(x, w, eps, off, out, next);
  }
  void add_rms_norm(const Tensor& x, Tensor& r, const Tensor& w, float eps, float off, Tensor& out,
                    const LinearWeight* next = nullptr) override {
    b_.add_rms_norm(x, r, w, eps, off, out, next);
  }
  void add(Tensor& a, const Tensor& b) override { b_.add(a, b); }
  void rope(Tensor& x, const Tensor& pos, const Tensor& f, int dim, bool il, float ms) override {
    b_.rope(x, pos, f, dim, il, ms);
  }
  void gated_activation(const Tensor& g, const Tensor& u, GatedActivation a, Tensor& out) override {
    b_.gated_activation(g, u, a, out);
  }
  void write_kv(const Tensor& k, const Tensor& v, KvLayerCache& c, const AttentionMetadata& m) override {
    b_.write_kv(k, v, c, m);
  }
  void paged_attention(const Tensor& q, const KvLayerCache& c, const AttentionMetadata& m, const AttentionParams& p,
                       Tensor& out) override {
    b_.paged_attention(q, c, m, p, out);
  }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override { b_.gather_rows(x, rows, out); }
  void softcap(Tensor& x, float cap) override { b_.softcap(x, cap); }
  void argmax_rows(const Tensor& logits, std::vector<int32_t>& out) override { b_.argmax_rows(logits, out); }

  bool has_device_sampler() const override { return true; }
  // Edits applied, then one of the 8 largest candidates (ties: lowest id) picked by uniform.
  bool sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs, const std::vector<LogitEdit>& edits,
                   std::vector<int32_t>& out) override {
    const int64_t vocab = logits.cols();
    std::vector<float> all(size_t(logits.numel()));
    b_.copy_to_host(all.data(), logits, all.size() * sizeof(float));
    out.clear();
    for (const SampleSpec& sp : specs) {
      std::vector<float> x(all.begin() + sp.row * vocab, all.begin() + (sp.row + 1) * vocab);
      for (int32_t e = sp.edits_begin; e < sp.edits_end; ++e) {
        const LogitEdit& d = edits[size_t(e)];
        x[size_t(d.token)] = apply_logit_edit(x[size_t(d.token)], d);
      }
      std::vector<int32_t> ids(static_cast<size_t>(vocab));
      for (int32_t i = 0; i < int32_t(vocab); ++i) ids[size_t(i)] = i;
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
      // -inf (banned, masked) and NaN are never candidates, as in a real sampler.
      const auto live = std::count_if(x.begin(), x.end(), [](float v) { return v > -INFINITY; });
      const int64_t k = std::min<int64_t>(8, live);
      out.push_back(k == 0 ? 0 : ids[size_t(std::min<int64_t>(k - 1, int64_t(sp.uniform * double(k))))]);
    }
    return true;
  }

 private:
  Backend& b_;
};

}  // namespace loom::testing_util
