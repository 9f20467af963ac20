// PsAccess over a fake parameter client that records each call and whose
// tickets the test completes: which client calls each step makes (gradients
// coalesced, riding with the end of step under BSP, asking back weights),
// the versions each consistency model waits for, staleness, re-pulls after
// a refusal, the stop flag and deadlines, and errors. One case runs the
// real client over a fake transport, for the error that names the shard.
#include "worker/client/ps_access.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/spec/model.h"
#include "common/wire/placement.h"
#include "worker/client/fake_transport.h"
#include "worker/client/request_test_util.h"
#include "worker/client/ticket.h"

namespace ps::client {
namespace {

JobSpec MlpSpec(ConsistencySpec::Model model, bool overlap, int64_t hidden) {
  JobSpec spec;
  spec.mutable_model()->mutable_mlp()->set_input_dim(784);
  spec.mutable_model()->mutable_mlp()->add_hidden(hidden);
  spec.mutable_model()->mutable_mlp()->set_num_classes(10);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_consistency()->set_overlap_communication(overlap);
  return spec;
}

int Connections(const JobSpec& spec, int shards) {
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpandModel(spec.model());
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  absl::StatusOr<Placement> p =
      ComputePlacement(*tensors, shards, kDefaultChunkBytes);
  EXPECT_TRUE(p.ok()) << p.status();
  return ConnectionsPerShard(spec, *p, 4 << 20);
}

// One connection only where the step's messages are off the critical path
// (ASP overlapping communication) and each shard's part is one message.
TEST(ConnectionsPerShard, OneOnlyForAnOverlappedStepOfOneMessage) {
  // 784 x 256: about 0.8 MB of weights.
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 256), 1), 1);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, false, 256), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::BSP, false, 256), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::SSP, false, 256), 1), 2);
  // 784 x 2048: about 6.4 MB, over one 4 MB message on one shard, under it
  // on each of two.
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 2048), 1), 2);
  EXPECT_EQ(Connections(MlpSpec(ConsistencySpec::ASP, true, 2048), 2), 1);
}

// --- PsAccess over a fake client ----------------------------------------

// Tensors w1 and w2 of 20000 floats (80 KB, over PsAccess's 64 KB flush
// size) in 5 chunks each, and b of 10 floats, on 2 shards.
constexpr int64_t kBig = 20000;
Placement Model3() {
  std::vector<TensorSpec> tensors(3);
  tensors[0].set_name("w1");
  tensors[0].add_shape(kBig);
  tensors[1].set_name("w2");
  tensors[1].add_shape(kBig);
  tensors[2].set_name("b");
  tensors[2].add_shape(10);
  return *ComputePlacement(tensors, 2, 16000);
}

enum class Kind {
  kPullAll,
  kPushTensors,
  kEndStep,
  kEndStepAndPull,
  kPushAndPull
};

// One client call as the fake saw it. `end`: its push ticket; `pull`: its
// pull ticket (PullAll: the only one). Both start with one message pending.
struct Op {
  Kind kind;
  int64_t clock = 0, base_version = 0, next_clock = 0, min_version = 0;
  std::vector<std::tuple<int, int64_t, size_t>> grads;  // tensor, offset, n
  std::vector<int64_t> already_asked;
  size_t tensors = 0;
  std::shared_ptr<TicketState> end, pull;
};

// Completes `t` with `s`, reporting `version`.
void Finish(const std::shared_ptr<TicketState>& t, int64_t version,
            absl::Status s = absl::OkStatus()) {
  t->RecordVersions(version, TicketState::kNone);
  t->Complete(s);
}

struct FakeLog {
  std::deque<Op> ops;  // references stay valid as it grows
  // Called on each new op (it may complete its tickets); unset: they stay
  // pending for the test.
  std::function<void(Op&)> respond;
  int cancels = 0;
  std::vector<std::vector<std::string>> moves;  // SetServerAddresses
  std::vector<Kind> kinds() const {
    std::vector<Kind> out;
    for (const Op& op : ops) out.push_back(op.kind);
    return out;
  }
};

class FakeClient final : public ParameterClient {
 public:
  FakeClient(Placement placement, FakeLog* log)
      : placement_(std::move(placement)), log_(log) {}

  Ticket PullAll(int64_t clock, int64_t min_version,
                 std::vector<absl::Span<float>> tensors) override {
    Op op = NewOp(Kind::kPullAll, clock, 0, {});
    op.min_version = min_version;
    op.tensors = tensors.size();
    return Ticket(Record(std::move(op)).pull);
  }
  Ticket PushTensor(int tensor_index, absl::Span<const float> grad,
                    int64_t clock, int64_t base_version) override {
    return PushTensors({{tensor_index, grad}}, clock, base_version);
  }
  Ticket PushTensors(std::vector<TensorGrad> grads, int64_t clock,
                     int64_t base_version) override {
    return Ticket(
        Record(NewOp(Kind::kPushTensors, clock, base_version, grads)).end);
  }
  Ticket EndStep(int64_t clock, int64_t base_version) override {
    return Ticket(Record(NewOp(Kind::kEndStep, clock, base_version, {})).end);
  }
  StepTickets EndStepAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors,
      const std::vector<int64_t>& already_asked) override {
    Op op = NewOp(Kind::kEndStepAndPull, clock, base_version, grads);
    op.next_clock = next_clock;
    op.min_version = min_version;
    op.tensors = tensors.size();
    op.already_asked = already_asked;
    const Op& r = Record(std::move(op));
    return {Ticket(r.end), Ticket(r.pull)};
  }
  StepTickets PushTensorsAndPull(
      std::vector<TensorGrad> grads, int64_t clock, int64_t base_version,
      int64_t next_clock, int64_t min_version,
      std::vector<absl::Span<float>> tensors) override {
    Op op = NewOp(Kind::kPushAndPull, clock, base_version, grads);
    op.next_clock = next_clock;
    op.min_version = min_version;
    op.tensors = tensors.size();
    const Op& r = Record(std::move(op));
    return {Ticket(r.end), Ticket(r.pull)};
  }
  const Placement& placement() const override { return placement_; }
  absl::Status SetServerAddresses(
      const std::vector<std::string>& addresses) override {
    log_->moves.push_back(addresses);
    return absl::OkStatus();
  }
  void CancelInFlight() override { ++log_->cancels; }

 private:
  static Op NewOp(Kind kind, int64_t clock, int64_t base_version,
                  const std::vector<TensorGrad>& grads) {
    Op op;
    op.kind = kind;
    op.clock = clock;
    op.base_version = base_version;
    for (const TensorGrad& g : grads) {
      op.grads.emplace_back(g.tensor_index, g.offset, g.grad.size());
    }
    op.end = std::make_shared<TicketState>();
    op.pull = std::make_shared<TicketState>();
    op.end->Add(1);
    op.pull->Add(1);
    return op;
  }
  const Op& Record(Op op) {
    log_->ops.push_back(std::move(op));
    if (log_->respond) log_->respond(log_->ops.back());
    return log_->ops.back();
  }

  const Placement placement_;
  FakeLog* const log_;
};

// Every op answered at once: pulls with `version`, pushes with their base
// version + `ahead`.
std::function<void(Op&)> AnswerAll(int64_t version, int64_t ahead = 0) {
  return [version, ahead](Op& op) {
    Finish(op.end, op.base_version + ahead);
    Finish(op.pull, version);
  };
}

struct Rig {
  explicit Rig(ConsistencySpec::Model model, PsAccessOptions options = {})
      : placement(Model3()),
        access(NewPsAccess(std::make_unique<FakeClient>(placement, &log), model,
                           options)) {}
  std::vector<absl::Span<float>> spans() {
    return {absl::MakeSpan(w1), absl::MakeSpan(w2), absl::MakeSpan(b)};
  }

  const Placement placement;
  FakeLog log;
  std::vector<float> w1 = std::vector<float>(kBig),
                     w2 = std::vector<float>(kBig), b = std::vector<float>(10);
  std::unique_ptr<PsAccess> access;
};

std::vector<int64_t> ChunksOf(const Placement& p, int tensor) {
  return ChunksOverlapping(p, tensor, 0, p.tensor_elements[tensor]);
}

// Pull waits as the model says: BSP for the version that equals the clock,
// ASP and SSP for any (SSP's bound is the shard's, from the clock); the
// result is the pulled version. FinishAndPull asks the same for clock + 1.
TEST(PsAccess, PullsWaitAsTheConsistencyModelSays) {
  struct Case {
    ConsistencySpec::Model model;
    int64_t min_version_at_4;
  };
  for (const Case& c :
       {Case{ConsistencySpec::BSP, 4}, Case{ConsistencySpec::ASP, 0},
        Case{ConsistencySpec::SSP, 0}}) {
    SCOPED_TRACE(ConsistencySpec::Model_Name(c.model));
    Rig rig(c.model);
    rig.log.respond = AnswerAll(/*version=*/3);
    absl::StatusOr<CallResult> v =
        rig.access->Pull(PullOf(4, rig.spans())).Wait();
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->version, 3);
    ASSERT_EQ(rig.log.ops.size(), 1u);
    const Op& pull = rig.log.ops[0];
    EXPECT_EQ(pull.kind, Kind::kPullAll);
    EXPECT_EQ(pull.clock, 4);
    EXPECT_EQ(pull.min_version, c.min_version_at_4);
    EXPECT_EQ(pull.tensors, 3u);
    absl::StatusOr<CallResult> end =
        rig.access->EndStep(EndOf(4, 3, rig.spans())).Wait();
    ASSERT_TRUE(end.ok()) << end.status();
    const Op& step = rig.log.ops.back();
    EXPECT_EQ(step.kind, Kind::kEndStepAndPull);
    EXPECT_EQ(step.next_clock, 5);
    EXPECT_EQ(step.min_version, c.model == ConsistencySpec::BSP ? 5 : 0);
  }
}

// Gradients are coalesced until 64 KB are pending, unless what is left of
// the step is small; under BSP whatever is pending rides with the end of
// step; under ASP/SSP it goes on its own first, and the end of step carries
// none.
TEST(PsAccess, GradientsAreCoalescedAndRideWithTheEndOfStep) {
  for (auto model :
       {ConsistencySpec::BSP, ConsistencySpec::ASP, ConsistencySpec::SSP}) {
    SCOPED_TRACE(ConsistencySpec::Model_Name(model));
    Rig rig(model);
    rig.log.respond = AnswerAll(/*version=*/7);
    const std::vector<float> g(kBig, 1.0f), gb(10, 1.0f);
    ASSERT_TRUE(rig.access->Push(GradOf(2, 6, 1, g)).ok());  // 80 KB, 80 left
    ASSERT_EQ(rig.log.kinds(), std::vector<Kind>{Kind::kPushTensors});
    EXPECT_EQ(rig.log.ops[0].grads,
              (std::vector<std::tuple<int, int64_t, size_t>>{{1, 0, kBig}}));
    EXPECT_EQ(rig.log.ops[0].clock, 2);
    EXPECT_EQ(rig.log.ops[0].base_version, 6);
    ASSERT_TRUE(rig.access->Push(GradOf(2, 6, 2, gb)).ok());  // 40 bytes
    ASSERT_TRUE(rig.access->Push(GradOf(2, 6, 0, g)).ok());   // none left
    EXPECT_EQ(rig.log.ops.size(), 1u);
    absl::StatusOr<CallResult> end =
        rig.access->EndStep(EndOf(2, 6, rig.spans())).Wait();
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_EQ(end->version, 7);
    const std::vector<std::tuple<int, int64_t, size_t>> rest = {{2, 0, 10},
                                                                {0, 0, kBig}};
    if (model == ConsistencySpec::BSP) {
      ASSERT_EQ(rig.log.kinds(),
                (std::vector<Kind>{Kind::kPushTensors, Kind::kEndStepAndPull}));
      EXPECT_EQ(rig.log.ops[1].grads, rest);
    } else {
      ASSERT_EQ(rig.log.kinds(),
                (std::vector<Kind>{Kind::kPushTensors, Kind::kPushTensors,
                                   Kind::kEndStepAndPull}));
      EXPECT_EQ(rig.log.ops[1].grads, rest);
      EXPECT_TRUE(rig.log.ops[2].grads.empty());
    }
    const Op& step = rig.log.ops.back();
    EXPECT_EQ(step.clock, 2);
    EXPECT_EQ(step.base_version, 6);
    EXPECT_TRUE(step.already_asked.empty());
  }
}

// The staleness of a step is the most versions any of its pushes found
// applied by others since its base version; pushes refused as too stale
// (ABORTED) are not errors and do not count.
TEST(PsAccess, StalenessIsTheLargestAnyPushSaw) {
  Rig rig(ConsistencySpec::ASP);
  int pushes = 0;
  rig.log.respond = [&](Op& op) {
    if (op.kind == Kind::kPushTensors) {
      // The first push saw 3 versions of others, the second was refused.
      if (pushes++ == 0) {
        Finish(op.end, op.base_version + 3);
      } else {
        Finish(op.end, 0, absl::AbortedError("too stale"));
      }
      return;
    }
    Finish(op.end, op.base_version + 1);
    Finish(op.pull, 12);
  };
  const std::vector<float> g(kBig, 1.0f), gb(10, 1.0f);
  ASSERT_TRUE(rig.access->Push(GradOf(0, 10, 1, g)).ok());
  ASSERT_TRUE(rig.access->Push(GradOf(0, 10, 0, g)).ok());
  ASSERT_TRUE(rig.access->Push(GradOf(0, 10, 2, gb)).ok());
  absl::StatusOr<CallResult> end = rig.access->EndStep(EndOf(0, 10)).Wait();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->staleness, 3);
  EXPECT_EQ(rig.log.kinds(),
            (std::vector<Kind>{Kind::kPushTensors, Kind::kPushTensors,
                               Kind::kEndStep}));
  EXPECT_EQ(rig.log.ops[2].clock, 0);
  EXPECT_EQ(rig.log.ops[2].base_version, 10);
}

// A push's error ends the step with it, naming the step.
TEST(PsAccess, APushErrorEndsTheStep) {
  Rig rig(ConsistencySpec::BSP);
  rig.log.respond = [](Op& op) {
    if (op.kind == Kind::kPushTensors) {
      Finish(
          op.end, 0,
          absl::UnavailableError(
              "/ps.ParameterService/Push to shard 1 (h:1), attempt 9: down"));
    } else {
      Finish(op.end, 1);
    }
    Finish(op.pull, 1);
  };
  const std::vector<float> g(kBig, 1.0f);
  ASSERT_TRUE(rig.access->Push(GradOf(5, 0, 1, g)).ok());
  absl::StatusOr<CallResult> staleness =
      rig.access->EndStep(EndOf(5, 0)).Wait();
  EXPECT_EQ(staleness.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(staleness.status().message().find("push at clock 5"),
            std::string::npos)
      << staleness.status();
  EXPECT_NE(staleness.status().message().find("shard 1"), std::string::npos);
}

// An end of step refused as too stale (ASP max_staleness) brings no
// weights: FinishAndPull pulls them on their own.
TEST(PsAccess, ARefusedEndOfStepPullsAgain) {
  Rig rig(ConsistencySpec::ASP);
  rig.log.respond = [](Op& op) {
    if (op.kind == Kind::kEndStepAndPull) {
      Finish(op.end, 0, absl::AbortedError("too stale"));
      Finish(op.pull, 0, absl::AbortedError("too stale"));
      return;
    }
    Finish(op.end, op.base_version);
    Finish(op.pull, 21);
  };
  absl::StatusOr<CallResult> end =
      rig.access->EndStep(EndOf(3, 0, rig.spans())).Wait();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->version, 21);
  ASSERT_EQ(rig.log.kinds(),
            (std::vector<Kind>{Kind::kEndStepAndPull, Kind::kPullAll}));
  EXPECT_EQ(rig.log.ops[1].clock, 4);
}

// Pushes that name next_weights ask back their chunks' next weights, which
// AwaitPart waits for chunk by chunk while the end of step is still on its
// way; the end of step does not ask for them again.
TEST(PsAccess, PushedChunksComeBackBeforeTheStepEnds) {
  Rig rig(ConsistencySpec::BSP);
  const std::vector<float> g(kBig, 1.0f), gb(10, 1.0f);
  auto push_part = [&](int index, const std::vector<float>& grad) {
    StepArgs r = GradOf(0, 0, index, grad);
    r.next_weights = rig.spans();
    return rig.access->Push(std::move(r));
  };
  ASSERT_TRUE(push_part(1, g).ok());
  ASSERT_EQ(rig.log.kinds(), std::vector<Kind>{Kind::kPushAndPull});
  const Op& push = rig.log.ops[0];
  EXPECT_EQ(push.next_clock, 1);
  EXPECT_EQ(push.min_version, 1);
  EXPECT_EQ(push.tensors, 3u);
  ASSERT_TRUE(push_part(2, gb).ok());
  ASSERT_TRUE(push_part(0, g).ok());
  Handle step = rig.access->EndStep(EndOf(0, 0, rig.spans()));
  ASSERT_EQ(rig.log.ops.size(), 2u);
  const Op& end = rig.log.ops[1];
  EXPECT_EQ(end.kind, Kind::kEndStepAndPull);
  const std::vector<int64_t> w2 = ChunksOf(rig.placement, 1);
  EXPECT_EQ(end.already_asked, w2);
  // w2's weights land (the push's pull is not done yet): AwaitPart for
  // them returns; the end of step and the rest are still pending.
  rig.log.ops[0].pull->MarkArrived(w2);
  EXPECT_TRUE(step.AwaitPart(1, 0, kBig).ok());
  EXPECT_TRUE(step.AwaitPart(1, 100, 200).ok());
  EXPECT_FALSE(Ticket(rig.log.ops[1].end).Done());
  // The rest comes with the end of step.
  Finish(rig.log.ops[0].end, 0);
  Finish(rig.log.ops[0].pull, 1);
  std::vector<int64_t> rest = ChunksOf(rig.placement, 0);
  rest.push_back(ChunksOf(rig.placement, 2)[0]);
  rig.log.ops[1].pull->MarkArrived(rest);
  EXPECT_TRUE(step.AwaitPart(0, 0, kBig).ok());
  Finish(rig.log.ops[1].end, 0);
  Finish(rig.log.ops[1].pull, 1);
  absl::StatusOr<CallResult> result = step.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->version, 1);
  EXPECT_EQ(result->staleness, 0);
  // Waiting again gives the same result without new calls.
  EXPECT_TRUE(step.Wait().ok());
  EXPECT_EQ(rig.log.ops.size(), 2u);
}

// An EndStep that carries gradients sends them all with the end of step at
// once and returns; its wait gives the staleness of the end (versions past
// the base) and the pulled version, pulling again when the end was refused.
TEST(PsAccess, AnEndWithGradientsSendsAllAndWaitsLater) {
  Rig rig(ConsistencySpec::ASP);
  const std::vector<float> g(kBig, 1.0f), gb(10, 1.0f);
  auto end_with = [&](int64_t clock, int64_t base) {
    StepArgs r = GradsOf(clock, base, {g, g, gb});
    r.next_weights = rig.spans();
    return rig.access->EndStep(std::move(r));
  };
  Handle pending = end_with(6, 4);
  ASSERT_EQ(rig.log.kinds(), std::vector<Kind>{Kind::kEndStepAndPull});
  const Op& op = rig.log.ops[0];
  EXPECT_EQ(op.grads, (std::vector<std::tuple<int, int64_t, size_t>>{
                          {0, 0, kBig}, {1, 0, kBig}, {2, 0, 10}}));
  EXPECT_EQ(op.clock, 6);
  EXPECT_EQ(op.base_version, 4);
  EXPECT_EQ(op.next_clock, 7);
  EXPECT_EQ(op.min_version, 0);
  Finish(op.end, 9);
  Finish(op.pull, 10);
  absl::StatusOr<CallResult> end = pending.Wait();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->staleness, 5);
  EXPECT_EQ(end->version, 10);

  // Refused: no staleness counted, and the weights are pulled on their own.
  pending = end_with(7, 10);
  rig.log.respond = AnswerAll(/*version=*/11);
  Finish(rig.log.ops[1].end, 0, absl::AbortedError("too stale"));
  Finish(rig.log.ops[1].pull, 0, absl::AbortedError("too stale"));
  end = pending.Wait();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->staleness, 0);
  EXPECT_EQ(end->version, 11);
  EXPECT_EQ(rig.log.ops.back().kind, Kind::kPullAll);
  EXPECT_EQ(rig.log.ops.back().clock, 8);
}

// A wait that the stop flag ends returns CANCELLED; one that outlasts the
// retry deadline returns UNAVAILABLE; both name the call.
TEST(PsAccess, WaitsEndOnStopAndAtTheRetryDeadline) {
  std::atomic<bool> stop{true};
  PsAccessOptions stopping;
  stopping.stop = &stop;
  Rig stopped(ConsistencySpec::BSP, stopping);
  absl::StatusOr<CallResult> v =
      stopped.access->Pull(PullOf(2, stopped.spans())).Wait();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(v.status().message().find("pull at clock 2: stopped"),
            std::string::npos)
      << v.status();

  PsAccessOptions impatient;
  impatient.retry_deadline = absl::ZeroDuration();
  Rig late(ConsistencySpec::BSP, impatient);
  v = late.access->Pull(PullOf(2, late.spans())).Wait();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find(
                "pull at clock 2: no answer from the parameter servers"),
            std::string::npos)
      << v.status();
}

// A failover's new addresses go to the client, which moves its calls
// (parameter_client.h).
TEST(PsAccess, SetServerAddressesMovesTheClientsShards) {
  Rig rig(ConsistencySpec::ASP);
  ASSERT_TRUE(rig.access->SetServerAddresses({"a2", "b"}).ok());
  EXPECT_EQ(rig.log.moves,
            (std::vector<std::vector<std::string>>{{"a2", "b"}}));
}

TEST(PsAccess, PartBoundariesAreTheChunkBoundaries) {
  Rig rig(ConsistencySpec::BSP);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(rig.access->PartBoundaries(t), ChunkBoundaries(rig.placement, t));
  }
  EXPECT_EQ(rig.access->PartBoundaries(0),
            (std::vector<int64_t>{4000, 8000, 12000, 16000}));
  rig.access->CancelCalls();
  EXPECT_EQ(rig.log.cancels, 1);
}

// Through the real client over a fake transport: a shard's error reaches
// the training loop naming the call, the shard and its address.
TEST(PsAccess, ErrorsNameTheShard) {
  const Placement p = Model3();
  auto transport = std::make_unique<FakeTransport>(2);
  FakeTransport* fake = transport.get();
  ParameterClientOptions options;
  options.server_addresses = {"a", "b"};
  auto c = ParameterClient::CreateWithTransport(options, "job", 1, p,
                                                std::move(transport));
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<ParameterAccess> access =
      NewPsAccess(*std::move(c), ConsistencySpec::BSP, {});
  std::vector<float> w1(kBig), w2(kBig), b(10);
  std::thread shards([&] {
    ASSERT_TRUE(fake->WaitForAttempts(2));
    fake->AnswerAll([](const FakeRequest& r) {
      if (r.shard == 0) {
        return FakeReply{absl::OkStatus(),
                         FakeTransport::Encode(PullResponse())};
      }
      return FakeReply::Error(
          absl::FailedPreconditionError("worker 1 is not a member"));
    });
  });
  absl::StatusOr<CallResult> v =
      access
          ->Pull(PullOf(
              0, {absl::MakeSpan(w1), absl::MakeSpan(w2), absl::MakeSpan(b)}))
          .Wait();
  shards.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find(
                "pull at clock 0: /ps.ParameterService/Pull to shard 1 "
                "(fake-shard-1), attempt 1: worker 1 is not a member"),
            std::string::npos)
      << v.status();
}

}  // namespace
}  // namespace ps::client
