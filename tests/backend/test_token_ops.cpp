// The token and copy ops (tests/backend/token_ops_cases.h) on the CPU backend:
// argmax_rows_to, sample_rows_to (no device sampler: false, nothing written),
// resolve_token_ids, download_tokens, copy and copy_kv_blocks. Exact.
#include "token_ops_cases.h"

namespace loom {
namespace {

class CpuTokenOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

TEST_F(CpuTokenOpsTest, ArgmaxRowsTo) {
  token_ops::argmax_rows_to(*be_);
}
TEST_F(CpuTokenOpsTest, SampleRowsTo) {
  token_ops::sample_rows_to(*be_);
}
TEST_F(CpuTokenOpsTest, ResolveTokenIds) {
  token_ops::resolve_token_ids(*be_);
}
TEST_F(CpuTokenOpsTest, DownloadTokens) {
  token_ops::download_tokens(*be_);
}
TEST_F(CpuTokenOpsTest, Copy) {
  token_ops::copy(*be_, {DType::F32, DType::F16, DType::BF16, DType::I32});
}
TEST_F(CpuTokenOpsTest, CopyKvBlocks) {
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) token_ops::copy_kv_blocks(*be_, kv);
}

}  // namespace
}  // namespace loom
