#include "worker/client/parameter_access.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ps::client {
namespace {

TEST(Handle, DefaultAndFinishedHandlesAreOver) {
  Handle none;
  EXPECT_TRUE(none.waited());
  EXPECT_TRUE(none.AwaitPart(0, 0, 10).ok());
  absl::StatusOr<CallResult> r = none.Wait();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version, 0);
  EXPECT_EQ(r->staleness, 0);

  Handle done(CallResult{.version = 4, .staleness = 2});
  EXPECT_TRUE(done.waited());
  EXPECT_EQ(done.Wait()->version, 4);
  EXPECT_EQ(done.Wait()->staleness, 2);

  Handle failed(absl::UnavailableError("shard 1"));
  EXPECT_EQ(failed.AwaitPart(0, 0, 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.Wait().status().code(), absl::StatusCode::kUnavailable);
}

TEST(Handle, DeferredWaitsOnceAndKeepsTheResult) {
  int waits = 0;
  Handle h = Handle::Deferred([&]() -> absl::StatusOr<CallResult> {
    ++waits;
    return CallResult{.version = 9, .staleness = 1};
  });
  EXPECT_FALSE(h.waited());
  EXPECT_EQ(waits, 0);  // nothing waited for before asked
  // Its parts arrive with the whole.
  EXPECT_TRUE(h.AwaitPart(1, 0, 5).ok());
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(h.Wait()->version, 9);
  EXPECT_EQ(h.Wait()->staleness, 1);
  EXPECT_TRUE(h.waited());
  EXPECT_EQ(waits, 1);
}

// A call whose parts arrive one by one: records what was awaited and fails
// the parts of tensor `bad`.
class PartCall : public Handle::Call {
 public:
  PartCall(std::vector<std::string>* log, int bad, absl::Status end)
      : log_(log), bad_(bad), end_(std::move(end)) {}
  absl::Status AwaitPart(int index, int64_t begin, int64_t end) override {
    log_->push_back(absl::StrCat("part ", index, " ", begin, " ", end));
    if (index == bad_) return absl::AbortedError("too stale");
    return absl::OkStatus();
  }
  absl::StatusOr<CallResult> Wait() override {
    log_->push_back("wait");
    if (!end_.ok()) return end_;
    return CallResult{.version = 3, .staleness = 0};
  }

 private:
  std::vector<std::string>* log_;
  const int bad_;
  const absl::Status end_;
};

TEST(Handle, PartsAreAwaitedOneByOne) {
  std::vector<std::string> log;
  Handle h(std::make_unique<PartCall>(&log, -1, absl::OkStatus()));
  EXPECT_TRUE(h.AwaitPart(0, 0, 4).ok());
  EXPECT_TRUE(h.AwaitPart(1, 4, 8).ok());
  EXPECT_FALSE(h.waited());
  EXPECT_EQ(h.Wait()->version, 3);
  // After the wait, parts are there without asking the call.
  EXPECT_TRUE(h.AwaitPart(2, 0, 1).ok());
  EXPECT_EQ(log,
            (std::vector<std::string>{"part 0 0 4", "part 1 4 8", "wait"}));
}

// A part that failed (a push refused as too stale) is settled by the whole
// wait, which pulls again: the caller sees its outcome.
TEST(Handle, AFailedPartTellsTheWholeResult) {
  std::vector<std::string> log;
  Handle recovered(std::make_unique<PartCall>(&log, 1, absl::OkStatus()));
  EXPECT_TRUE(recovered.AwaitPart(1, 0, 2).ok());
  EXPECT_TRUE(recovered.waited());
  EXPECT_EQ(log, (std::vector<std::string>{"part 1 0 2", "wait"}));

  log.clear();
  Handle lost(
      std::make_unique<PartCall>(&log, 1, absl::UnavailableError("shard 0")));
  EXPECT_EQ(lost.AwaitPart(1, 0, 2).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(lost.Wait().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log, (std::vector<std::string>{"part 1 0 2", "wait"}));
}

TEST(Handle, MovesTheCallAlong) {
  std::vector<std::string> log;
  Handle a(std::make_unique<PartCall>(&log, -1, absl::OkStatus()));
  Handle b = std::move(a);
  EXPECT_EQ(b.Wait()->version, 3);
  EXPECT_EQ(log, (std::vector<std::string>{"wait"}));
}

TEST(WholeTensors, OnePerTensorInModelOrder) {
  const std::vector<float> a = {1, 2}, b = {3};
  std::vector<TensorGrad> g = WholeTensors({a, b});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].tensor_index, 0);
  EXPECT_EQ(g[1].tensor_index, 1);
  EXPECT_EQ(g[1].grad.data(), b.data());
  EXPECT_EQ(g[0].offset, 0);
}

}  // namespace
}  // namespace ps::client
