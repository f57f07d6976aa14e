// Backend's default implementations of the optional operations: a plain copy
// through host memory, no recorded steps, and timing marks on the host clock.
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace loom {

void Backend::copy(Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.dtype() == src.dtype() && dst.nbytes() == src.nbytes(), "copy: {} {} into {} {}",
             dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
  const auto bytes = static_cast<size_t>(src.nbytes());
  if (bytes == 0) return;
  if (dst.device() == Device::Cpu && src.device() == Device::Cpu) {
    synchronize();
    std::memmove(dst.data(), src.data(), bytes);
    return;
  }
  std::vector<uint8_t> staging(bytes);
  copy_to_host(staging.data(), src, bytes);
  copy_from_host(dst, staging.data(), bytes);
}

LinearWeight Backend::prepare_linear(const LinearWeight& host) {
  LOOM_CHECK(!host.quantize,
             "backend {} cannot quantise weights to FP8 at load (--quantization fp8 needs the CUDA "
             "backend)",
             name());
  LinearWeight out;
  out.weight = prepare_weight(host.fp8() ? dequantize_fp8_linear(host) : host.weight);
  return out;
}

void Backend::linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out) {
  LOOM_CHECK(!w.fp8(), "backend {} has no FP8 matmul (prepare FP8 weights with prepare_linear)",
             name());
  matmul(x, w.weight, bias, out);
}

void Backend::linear_many(const Tensor& x, const std::vector<LinearJob>& jobs) {
  for (const LinearJob& j : jobs) linear(x, *j.w, j.bias, *j.out);
}

std::optional<LinearWeight> Backend::stack_linear(const std::vector<const LinearWeight*>& parts) {
  LOOM_CHECK(!parts.empty(), "stack_linear of nothing");
  const Tensor& first = parts[0]->weight;
  int64_t rows = 0;
  for (const LinearWeight* p : parts) {
    const Tensor& t = p->weight;
    if (p->fp8() || p->quantize || t.dtype() != first.dtype() || t.device() != first.device() ||
        t.ndim() != 2 || t.dim(1) != first.dim(1))
      return std::nullopt;
    rows += t.dim(0);
  }
  LinearWeight out;
  out.weight = alloc(first.dtype(), {rows, first.dim(1)});
  int64_t at = 0;
  for (const LinearWeight* p : parts) {
    Tensor dst = out.weight.slice_rows(at, p->weight.dim(0));
    copy(dst, p->weight);
    at += p->weight.dim(0);
  }
  return out;
}

void Backend::split_qkv(const Tensor&, const QkvRope*, Tensor&, Tensor&, Tensor&, KvLayerCache*,
                        const AttentionMetadata*) {
  LOOM_THROW("backend {} has no fused projections", name());
}

void Backend::gated_activation_fused(const Tensor&, GatedActivation, Tensor&, const LinearWeight*) {
  LOOM_THROW("backend {} has no fused projections", name());
}

void Backend::begin_capture() { LOOM_THROW("backend {} cannot record steps", name()); }

std::unique_ptr<StepGraph> Backend::end_capture() { LOOM_THROW("backend {} cannot record steps", name()); }

bool Backend::replay(StepGraph&) { LOOM_THROW("backend {} cannot record steps", name()); }

namespace {

void check_ids(const Tensor& ids, int64_t n, const char* what) {
  LOOM_CHECK(ids.dtype() == DType::I32 && n >= 0 && ids.numel() >= n, "{}: ids {} {} cannot hold {} rows", what,
             dtype_name(ids.dtype()), shape_str(ids.shape()), n);
}

std::vector<int32_t> ids_to_host(Backend& be, const Tensor& ids, int64_t n) {
  std::vector<int32_t> host(static_cast<size_t>(n));
  be.copy_to_host(host.data(), ids, host.size() * sizeof(int32_t));
  return host;
}

class ReadyDownload final : public Backend::TokenDownload {
 public:
  explicit ReadyDownload(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  const std::vector<int32_t>& wait() override { return ids_; }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace

void Backend::argmax_rows_to(const Tensor& logits, Tensor& ids) {
  std::vector<int32_t> host;
  argmax_rows(logits, host);
  check_ids(ids, static_cast<int64_t>(host.size()), "argmax_rows_to");
  copy_from_host(ids, host.data(), host.size() * sizeof(int32_t));
}

bool Backend::sample_rows_to(const Tensor& logits, const std::vector<SampleSpec>& specs,
                             const std::vector<LogitEdit>& edits, Tensor& ids) {
  std::vector<int32_t> drawn;
  if (!sample_rows(logits, specs, edits, drawn)) return false;
  if (specs.empty()) return true;
  const int64_t rows = logits.rows();
  check_ids(ids, rows, "sample_rows_to");
  std::vector<int32_t> host = ids_to_host(*this, ids, rows);
  for (size_t i = 0; i < specs.size(); ++i) host[static_cast<size_t>(specs[i].row)] = drawn[i];
  copy_from_host(ids, host.data(), host.size() * sizeof(int32_t));
  return true;
}

void Backend::resolve_token_ids(Tensor& ids, const Tensor& src) {
  check_ids(ids, ids.numel(), "resolve_token_ids");
  check_ids(src, src.numel(), "resolve_token_ids");
  std::vector<int32_t> host = ids_to_host(*this, ids, ids.numel());
  const std::vector<int32_t> from = ids_to_host(*this, src, src.numel());
  for (int32_t& id : host) {
    if (id >= 0) continue;
    const int64_t r = -int64_t{id} - 1;
    LOOM_CHECK(r < static_cast<int64_t>(from.size()), "token source row {} outside [0, {})", r, from.size());
    id = from[static_cast<size_t>(r)];
  }
  copy_from_host(ids, host.data(), host.size() * sizeof(int32_t));
}

std::unique_ptr<Backend::TokenDownload> Backend::download_tokens(const Tensor& ids, int64_t n) {
  check_ids(ids, n, "download_tokens");
  return std::make_unique<ReadyDownload>(ids_to_host(*this, ids, n));
}

namespace {
struct HostMark final : Backend::TimingMark {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};
}  // namespace

std::unique_ptr<Backend::TimingMark> Backend::mark_time() {
  return std::make_unique<HostMark>();
}

std::optional<double> Backend::seconds_between(const TimingMark& from, const TimingMark& to) {
  const auto* a = dynamic_cast<const HostMark*>(&from);
  const auto* b = dynamic_cast<const HostMark*>(&to);
  LOOM_CHECK(a && b, "seconds_between: marks of another backend");
  return std::chrono::duration<double>(b->at - a->at).count();
}

}  // namespace loom
