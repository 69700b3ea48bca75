#include "operation_jobs.h"

#include <cstdlib>
#include <random>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace streamattn {
namespace testing_util {

bool Small() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }

namespace {

class AttentionJob : public Job {
 public:
  explicit AttentionJob(const AttentionCase& c) : call_(c) {}
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    call_.out.FillBytes(0xEE);
    call_.lse.FillBytes(0xEE);
    if (call_.Run(ctx) != SATTN_OK) return {};
    std::vector<uint8_t> bytes = call_.out.bytes();
    bytes.insert(bytes.end(), call_.lse.bytes().begin(), call_.lse.bytes().end());
    return bytes;
  }

 private:
  AttentionCall call_;
};

class SoftmaxJob : public Job {
 public:
  SoftmaxJob(int64_t rows, int64_t n, int mode)  // mode 0: softmax, 1: log, 2: top-k
      : mode_(mode),
        in_(SATTN_DTYPE_BF16, {rows, n}),
        out_(SATTN_DTYPE_F32, {rows, n}),
        indices_(SATTN_DTYPE_I32, {rows, 16}),
        probs_(SATTN_DTYPE_F32, {rows, 16}) {
    std::mt19937_64 rng(static_cast<uint64_t>(rows * 31 + n));
    in_.FillUniform(rng, -20, 20);
  }
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    const sattn_tensor in = in_.view(), out = out_.view();
    const sattn_tensor indices = indices_.view(), probs = probs_.view();
    sattn_status status;
    if (mode_ == 2) {
      status = sattn_softmax_topk(ctx, &in, 16, &indices, &probs, nullptr, nullptr);
    } else {
      status = mode_ == 0 ? sattn_softmax(ctx, &in, &out, nullptr)
                          : sattn_log_softmax(ctx, &in, &out, nullptr);
    }
    if (status != SATTN_OK) return {};
    if (mode_ != 2) return out_.bytes();
    std::vector<uint8_t> bytes = indices_.bytes();
    bytes.insert(bytes.end(), probs_.bytes().begin(), probs_.bytes().end());
    return bytes;
  }

 private:
  int mode_;
  HostTensor in_, out_, indices_, probs_;
};

class MergeJob : public Job {
 public:
  MergeJob() {
    std::mt19937_64 rng(17);
    for (int i = 0; i < 3; ++i) {
      o_.emplace_back(SATTN_DTYPE_F16, std::vector<int64_t>{2, 9, 4, 64});
      lse_.emplace_back(SATTN_DTYPE_F32, std::vector<int64_t>{2, 4, 9});
      o_.back().FillUniform(rng, -1, 1);
      lse_.back().FillUniform(rng, -5, 5);
    }
  }
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    std::vector<sattn_tensor> o, lse;
    for (const HostTensor& t : o_) o.push_back(t.view());
    for (const HostTensor& t : lse_) lse.push_back(t.view());
    const sattn_tensor out = out_.view(), lse_out = lse_out_.view();
    if (sattn_merge_states(ctx, 3, o.data(), lse.data(), &out, &lse_out) != SATTN_OK) return {};
    std::vector<uint8_t> bytes = out_.bytes();
    bytes.insert(bytes.end(), lse_out_.bytes().begin(), lse_out_.bytes().end());
    return bytes;
  }

 private:
  std::vector<HostTensor> o_, lse_;
  HostTensor out_{SATTN_DTYPE_F32, {2, 9, 4, 64}}, lse_out_{SATTN_DTYPE_F32, {2, 4, 9}};
};

}  // namespace

// Every operation, and the paths that differ between one thread and many: prefill work items,
// split-KV decode, softmax rows split across tasks.
std::vector<std::unique_ptr<Job>> MakeJobs() {
  std::vector<std::unique_ptr<Job>> jobs;
  AttentionCase prefill;
  prefill.seq_q = Small() ? 70 : 200, prefill.seq_k = Small() ? 90 : 300;
  prefill.heads_q = 4, prefill.heads_kv = 2, prefill.head_dim = 64, prefill.causal = true;
  prefill.kv_dtype = SATTN_DTYPE_F16, prefill.sinks = true;
  jobs.push_back(std::make_unique<AttentionJob>(prefill));
  AttentionCase decode;
  decode.batch = 2, decode.seq_q = 1, decode.seq_k = Small() ? 1536 : 4096;
  decode.heads_q = 8, decode.heads_kv = 2, decode.head_dim = 64, decode.page_size = 32;
  decode.seqused_k = {decode.seq_k, decode.seq_k / 2 + 5};
  jobs.push_back(std::make_unique<AttentionJob>(decode));
  const int64_t n = Small() ? 20000 : 50000;
  for (int mode = 0; mode < 3; ++mode) jobs.push_back(std::make_unique<SoftmaxJob>(3, n, mode));
  jobs.push_back(std::make_unique<SoftmaxJob>(33, 500, 0));
  jobs.push_back(std::make_unique<MergeJob>());
  return jobs;
}

std::vector<std::vector<uint8_t>> SingleThreadedResults() {
  ScopedContext ctx(1);
  std::vector<std::vector<uint8_t>> want;
  for (auto& job : MakeJobs()) {
    want.push_back(job->Run(ctx.get()));
    EXPECT_FALSE(want.back().empty()) << sattn_last_error();
  }
  return want;
}

}  // namespace testing_util
}  // namespace streamattn
