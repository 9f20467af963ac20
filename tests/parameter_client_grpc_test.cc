// The parameter client over real gRPC against in-process shards (ShardStore
// + ParameterService on 127.0.0.1:0): splitting into messages, half-precision
// wire dtypes, the bounded ticket wait, cancellation, fused pushes and pulls,
// argument errors, and a shard that moves to another server (failover). (The
// call engine's retries, backoff and splitting are unit-tested over a fake
// transport in worker/client/.)
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.grpc.pb.h"
#include "server/shard/parameter_service.h"
#include "server/shard/shard_store.h"
#include "worker/client/parameter_client.h"

namespace ps {
namespace {

using client::ParameterClient;
using client::ParameterClientOptions;
using client::TensorGrad;
using client::Ticket;
using server::ParameterServiceAdapter;
using server::ParameterServiceOptions;
using server::ShardStore;

constexpr absl::Duration kWait = absl::Seconds(30);

struct Shard {
  std::unique_ptr<ShardStore> store;
  std::unique_ptr<ParameterServiceAdapter> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  ~Shard() {
    store->Shutdown();
    server->Shutdown(std::chrono::system_clock::now());
    service->Stop();
  }
};

JobSpec Spec(ConsistencySpec::Model model) {
  JobSpec spec;
  spec.set_name("client");
  spec.set_chunk_bytes(400);  // 100 floats per chunk
  spec.set_num_workers(2);
  for (auto [name, n] : {std::pair<const char*, int>{"w", 1000}, {"b", 30}}) {
    TensorSpec* t = spec.mutable_model()->add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->mutable_init()->set_kind(InitializerSpec::CONSTANT);
    t->mutable_init()->set_value(2.0f);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_data()->set_max_steps(10);
  return spec;
}

// A shard `index` of `count` for `spec`'s job "job" (workers 1 and 2).
std::unique_ptr<Shard> StartShard(
    const JobSpec& spec, int index, int count,
    const ParameterServiceOptions& service_options = {}) {
  auto shard = std::make_unique<Shard>();
  shard->store = *ShardStore::Create({});
  shard->service =
      *ParameterServiceAdapter::Create(shard->store.get(), service_options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(shard->service->service());
  shard->server = builder.BuildAndStart();
  shard->address = absl::StrCat("127.0.0.1:", port);
  SetupJobRequest r;
  r.set_job_id("job");
  *r.mutable_spec() = spec;
  r.set_shard_index(index);
  r.set_num_shards(count);
  r.add_worker_ids(1);
  r.add_worker_ids(2);
  EXPECT_TRUE(shard->store->SetupJob(r).ok());
  return shard;
}

Placement PlacementOf(const JobSpec& spec, int shards) {
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  return *ComputePlacement(tensors, shards, spec.chunk_bytes());
}

class Cluster {
 public:
  Cluster(int shards, const JobSpec& spec,
          const ParameterServiceOptions& service_options = {})
      : spec_(spec), placement_(PlacementOf(spec, shards)) {
    for (int s = 0; s < shards; ++s) {
      shards_.push_back(StartShard(spec, s, shards, service_options));
    }
  }

  std::unique_ptr<ParameterClient> Client(int64_t worker,
                                          ParameterClientOptions options = {}) {
    for (auto& s : shards_) options.server_addresses.push_back(s->address);
    auto c = ParameterClient::Create(options, "job", worker, placement_);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  ShardStore& store(int s) { return *shards_[s]->store; }
  const std::string& address(int s) const { return shards_[s]->address; }
  const Placement& placement() const { return placement_; }

 private:
  JobSpec spec_;
  std::vector<std::unique_ptr<Shard>> shards_;
  Placement placement_;
};

struct Weights {
  std::vector<float> w = std::vector<float>(1000), b = std::vector<float>(30);
  std::vector<absl::Span<float>> spans() {
    return {absl::MakeSpan(w), absl::MakeSpan(b)};
  }
};

struct WireCase {
  const char* name;
  DType dtype;
  int64_t max_request_bytes;
  int connections;
};

// Whatever the message size, connection count and wire dtype, a push of
// 0.5 and a pull give 2 - 0.5 everywhere, on every shard.
TEST(ParameterClient, PushesAndPullsWholeTensorsAcrossShards) {
  const std::vector<WireCase> cases = {
      {"one_message_per_shard", FLOAT32, 1 << 20, 1},
      {"a_message_per_chunk", FLOAT32, 400, 2},
      {"fp16", FLOAT16, 4096, 2},
      {"bf16", BFLOAT16, 1 << 20, 3},
  };
  for (const WireCase& c : cases) {
    SCOPED_TRACE(c.name);
    Cluster cluster(2, Spec(ConsistencySpec::ASP));
    ParameterClientOptions options;
    options.wire_dtype = c.dtype;
    options.max_request_bytes = c.max_request_bytes;
    options.connections_per_shard = c.connections;
    auto client = cluster.Client(1, options);
    Weights weights;
    ASSERT_TRUE(client->PullAll(0, 0, weights.spans()).Wait(kWait).ok());
    for (float x : weights.w) ASSERT_EQ(x, 2.0f);
    const std::vector<float> gw(1000, 0.5f), gb(30, 0.5f);
    Ticket a = client->PushTensor(0, gw, 0);
    Ticket b = client->PushTensor(1, gb, 0);
    Ticket e = client->EndStep(0);
    for (Ticket* t : {&a, &b, &e})
      ASSERT_TRUE(t->Wait(kWait).ok()) << t->Wait(kWait);
    EXPECT_EQ(e.version(), 1);  // each shard counted the step
    ASSERT_TRUE(client->PullAll(1, 0, weights.spans()).Wait(kWait).ok());
    for (float x : weights.w) ASSERT_EQ(x, 1.5f);
    for (float x : weights.b) ASSERT_EQ(x, 1.5f);
  }
}

// A BSP pull for a version that needs another worker's gradient: Wait is
// bounded and says so, and the same ticket completes once it arrives.
TEST(ParameterClient, TicketWaitIsBounded) {
  Cluster cluster(1, Spec(ConsistencySpec::BSP));
  auto w1 = cluster.Client(1);
  auto w2 = cluster.Client(2);
  const std::vector<float> gw(1000, 1.0f), gb(30, 1.0f);
  for (Ticket t :
       {w1->PushTensor(0, gw, 0), w1->PushTensor(1, gb, 0), w1->EndStep(0)}) {
    ASSERT_TRUE(t.Wait(kWait).ok());
  }
  Weights weights;
  Ticket pull = w1->PullAll(1, 1, weights.spans());
  EXPECT_EQ(pull.Wait(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(pull.Done());
  for (Ticket t :
       {w2->PushTensor(0, gw, 0), w2->PushTensor(1, gb, 0), w2->EndStep(0)}) {
    ASSERT_TRUE(t.Wait(kWait).ok());
  }
  ASSERT_TRUE(pull.Wait(kWait).ok());
  EXPECT_EQ(pull.version(), 1);
  for (float x : weights.w) ASSERT_EQ(x, 1.0f);
}

// With wait_spin, Wait and WaitForChunks poll before they sleep: they keep
// their timeout (shorter than the spin), and they see the result whether it
// lands while they poll (a spin of 2 s, the other worker's gradient after
// 5 ms) or after they fell asleep (a spin of 1 ms, the gradient after
// 200 ms).
TEST(ParameterClient, SpinningWaitsKeepTheirTimeoutAndSeeTheResult) {
  struct Case {
    absl::Duration spin, arrival;
  };
  for (const Case& c : {Case{absl::Seconds(2), absl::Milliseconds(5)},
                        Case{absl::Milliseconds(1), absl::Milliseconds(200)}}) {
    SCOPED_TRACE(absl::StrCat("spin ", absl::FormatDuration(c.spin)));
    Cluster cluster(1, Spec(ConsistencySpec::BSP));
    ParameterClientOptions options;
    options.wait_spin = c.spin;
    auto w1 = cluster.Client(1, options);
    auto w2 = cluster.Client(2);
    const std::vector<float> g1w(1000, 1.0f), g1b(30, 1.0f);
    const std::vector<float> g2w(1000, 3.0f), g2b(30, 3.0f);
    for (Ticket t : {w1->PushTensor(0, g1w, 0), w1->PushTensor(1, g1b, 0),
                     w1->EndStep(0)}) {
      ASSERT_TRUE(t.Wait(kWait).ok());
    }
    Weights weights;
    Ticket pull = w1->PullAll(1, 1, weights.spans());
    std::vector<int64_t> all_chunks;
    for (size_t id = 0; id < cluster.placement().chunks.size(); ++id) {
      all_chunks.push_back(static_cast<int64_t>(id));
    }
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(pull.Wait(absl::Milliseconds(10)).code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(pull.WaitForChunks(all_chunks, absl::Milliseconds(10)).code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1));  // not the 2 s spin
    std::thread other([&] {
      absl::SleepFor(c.arrival);
      for (Ticket t : {w2->PushTensor(0, g2w, 0), w2->PushTensor(1, g2b, 0),
                       w2->EndStep(0)}) {
        EXPECT_TRUE(t.Wait(kWait).ok());
      }
    });
    EXPECT_TRUE(pull.WaitForChunks(all_chunks, kWait).ok());
    EXPECT_TRUE(pull.Wait(kWait).ok());
    other.join();
    EXPECT_EQ(pull.version(), 1);
    for (float x : weights.w) ASSERT_EQ(x, 0.0f);  // 2 - mean(1, 3)
    for (float x : weights.b) ASSERT_EQ(x, 0.0f);
  }
}

// EndStepAndPull: the gradients go with the end of step and its answer
// carries the next step's weights, in one message per shard or, when they
// do not fit, with the rest pulled after it; with and without a send
// thread, and with the end of step pipelined (each message answered with
// its own chunks) or not. The second step pushes the bias first on its own,
// so the end of step must also bring back chunks it did not carry.
TEST(ParameterClient, EndStepAndPullBringsTheNextWeights) {
  const std::vector<WireCase> cases = {
      {"one_message_per_shard", FLOAT32, 1 << 20, 1},
      {"two_connections", FLOAT32, 1 << 20, 2},
      {"a_message_per_chunk", FLOAT32, 400, 2},
      {"fp16", FLOAT16, 4096, 2},
  };
  for (bool send_thread : {false, true}) {
    for (bool pipeline : {false, true}) {
      for (const WireCase& c : cases) {
        SCOPED_TRACE(absl::StrCat(c.name, send_thread ? " send thread" : "",
                                  pipeline ? " pipelined" : ""));
        Cluster cluster(2, Spec(ConsistencySpec::ASP));
        ParameterClientOptions options;
        options.wire_dtype = c.dtype;
        options.max_request_bytes = c.max_request_bytes;
        options.connections_per_shard = c.connections;
        options.send_thread = send_thread;
        options.pipeline_step_end = pipeline;
        auto client = cluster.Client(1, options);
        Weights weights;
        ASSERT_TRUE(client->PullAll(0, 0, weights.spans()).Wait(kWait).ok());
        const std::vector<float> gw(1000, 0.5f), gb(30, 0.5f);
        for (int64_t step = 0; step < 2; ++step) {
          std::vector<TensorGrad> grads = {{1, gb}, {0, gw}};
          if (step == 1) {
            ASSERT_TRUE(client->PushTensors({{1, gb}}, step).Wait(kWait).ok());
            grads = {{0, gw}};
          }
          ParameterClient::StepTickets t = client->EndStepAndPull(
              grads, step, ParameterClient::kPulledVersion, step + 1, 0,
              weights.spans());
          ASSERT_TRUE(t.end.Wait(kWait).ok()) << t.end.Wait(kWait);
          ASSERT_TRUE(t.pull.Wait(kWait).ok()) << t.pull.Wait(kWait);
          EXPECT_EQ(t.pull.version(), step + 1);  // each shard counted it
          const float want = 2.0f - 0.5f * (step + 1);
          for (float x : weights.w) ASSERT_EQ(x, want);
          for (float x : weights.b) ASSERT_EQ(x, want);
        }
      }
    }
  }
}

// BSP: the answer to the end of step waits for the step to close (the
// other worker's gradient), then carries the averaged update.
TEST(ParameterClient, EndStepAndPullWaitsForTheBspStep) {
  for (bool pipeline : {false, true}) {
    SCOPED_TRACE(pipeline ? "pipelined" : "not pipelined");
    Cluster cluster(2, Spec(ConsistencySpec::BSP));
    ParameterClientOptions options;
    options.max_request_bytes = 400;  // several pull groups per shard
    options.pipeline_step_end = pipeline;
    auto w1 = cluster.Client(1, options);
    auto w2 = cluster.Client(2, options);
    const std::vector<float> g1w(1000, 1.0f), g1b(30, 1.0f);
    const std::vector<float> g2w(1000, 3.0f), g2b(30, 3.0f);
    Weights weights1, weights2;
    ParameterClient::StepTickets t1 =
        w1->EndStepAndPull({{0, g1w}, {1, g1b}}, 0, 0, 1, 1, weights1.spans());
    // The end of step is answered with the weights, so neither is done before
    // the step closes.
    EXPECT_EQ(t1.pull.Wait(absl::Milliseconds(100)).code(),
              absl::StatusCode::kDeadlineExceeded);
    EXPECT_FALSE(t1.end.Done());
    ParameterClient::StepTickets t2 =
        w2->EndStepAndPull({{0, g2w}, {1, g2b}}, 0, 0, 1, 1, weights2.spans());
    for (const Ticket* t : {&t1.end, &t1.pull, &t2.end, &t2.pull}) {
      ASSERT_TRUE(t->Wait(kWait).ok()) << t->Wait(kWait);
    }
    EXPECT_EQ(t1.pull.version(), 1);
    EXPECT_EQ(t2.pull.version(), 1);
    for (Weights* w : {&weights1, &weights2}) {
      for (float x : w->w) ASSERT_EQ(x, 0.0f);  // 2 - mean(1, 3)
      for (float x : w->b) ASSERT_EQ(x, 0.0f);
    }
  }
}

// CancelInFlight ends a pull waiting on the server (a BSP step the other
// worker never closes), pushes and the end of step with it, and a call
// waiting to be retried (a shard that is down), promptly and with
// CANCELLED; the client works as before afterwards.
TEST(ParameterClient, CancelInFlightEndsWaitingAndRetryingCalls) {
  Cluster cluster(2, Spec(ConsistencySpec::BSP));
  ParameterClientOptions options;
  options.send_thread = true;
  auto w1 = cluster.Client(1, options);
  const std::vector<float> gw(1000, 1.0f), gb(30, 1.0f);
  Weights weights;
  ParameterClient::StepTickets t =
      w1->EndStepAndPull({{0, gw}, {1, gb}}, 0, 0, 1, 1, weights.spans());
  EXPECT_EQ(t.pull.Wait(absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Time start = absl::Now();
  w1->CancelInFlight();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(t.end.Done());
  ASSERT_TRUE(t.pull.Done());
  EXPECT_EQ(t.pull.Wait(kWait).code(), absl::StatusCode::kCancelled)
      << t.pull.Wait(kWait);
  // Afterwards: worker 2 closes the step, and worker 1's pull of it works.
  auto w2 = cluster.Client(2, options);
  ParameterClient::StepTickets t2 =
      w2->EndStepAndPull({{0, gw}, {1, gb}}, 0, 0, 1, 1, weights.spans());
  ASSERT_TRUE(t2.pull.Wait(kWait).ok()) << t2.pull.Wait(kWait);
  Weights again;
  ASSERT_TRUE(w1->PullAll(1, 1, again.spans()).Wait(kWait).ok());

  // A shard that does not answer: the pull is retried with backoff until
  // cancelled.
  ParameterClientOptions down;
  down.server_addresses = {"127.0.0.1:1", "127.0.0.1:1"};
  down.retry.max_attempts = 1000;
  down.retry.total_deadline = absl::Seconds(60);
  auto lost =
      ParameterClient::Create(down, "job", 1, cluster.placement()).value();
  Ticket pull = lost->PullAll(0, 0, again.spans());
  EXPECT_EQ(pull.Wait(absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  start = absl::Now();
  lost->CancelInFlight();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(pull.Wait(kWait).code(), absl::StatusCode::kCancelled);
}

// BSP: parts of a tensor pushed with PushTensorsAndPull come back as soon
// as every worker has pushed them (before the step closes), chunk by
// chunk; the end of step asks only for the rest.
TEST(ParameterClient, PushTensorsAndPullBringsPartsBeforeTheStepCloses) {
  Cluster cluster(2, Spec(ConsistencySpec::BSP));
  const Placement& p = cluster.placement();
  EXPECT_EQ(
      ChunkBoundaries(p, 0),
      (std::vector<int64_t>{100, 200, 300, 400, 500, 600, 700, 800, 900}));
  EXPECT_TRUE(ChunkBoundaries(p, 1).empty());
  const std::vector<int64_t> first = ChunksOverlapping(p, 0, 0, 500);
  const std::vector<int64_t> second = ChunksOverlapping(p, 0, 500, 1000);
  EXPECT_EQ(first, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ChunksOverlapping(p, 0, 450, 501), (std::vector<int64_t>{4, 5}));
  auto w1 = cluster.Client(1);
  auto w2 = cluster.Client(2);
  const std::vector<float> g1(1000, 1.0f), g1b(30, 1.0f);
  const std::vector<float> g2(1000, 3.0f), g2b(30, 3.0f);
  Weights weights1, weights2;
  weights1.w.assign(1000, -7.0f);
  weights2.w.assign(1000, -7.0f);
  const absl::Span<const float> g1_head = absl::MakeConstSpan(g1).first(500);
  const absl::Span<const float> g2_head = absl::MakeConstSpan(g2).first(500);
  ParameterClient::StepTickets part1 =
      w1->PushTensorsAndPull({{0, g1_head}}, 0, 0, 1, 1, weights1.spans());
  EXPECT_EQ(part1.pull.WaitForChunks(first, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ParameterClient::StepTickets part2 =
      w2->PushTensorsAndPull({{0, g2_head}}, 0, 0, 1, 1, weights2.spans());
  for (const auto* t : {&part1, &part2}) {
    ASSERT_TRUE(t->pull.WaitForChunks(first, kWait).ok());
    ASSERT_TRUE(t->pull.Wait(kWait).ok());
    EXPECT_EQ(t->pull.version(), 1);
  }
  for (Weights* w : {&weights1, &weights2}) {
    for (int i = 0; i < 500; ++i) ASSERT_EQ(w->w[i], 0.0f) << i;
    for (int i = 500; i < 1000; ++i) ASSERT_EQ(w->w[i], -7.0f) << i;
  }
  // The rest with the end of step; the first part is not asked again.
  weights1.w.assign(1000, -7.0f);
  ParameterClient::StepTickets end1 = w1->EndStepAndPull(
      {{0, absl::MakeConstSpan(g1).subspan(500), 500}, {1, g1b}}, 0, 0, 1, 1,
      weights1.spans(), first);
  EXPECT_EQ(end1.pull.WaitForChunks(second, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ParameterClient::StepTickets end2 = w2->EndStepAndPull(
      {{0, absl::MakeConstSpan(g2).subspan(500), 500}, {1, g2b}}, 0, 0, 1, 1,
      weights2.spans(), first);
  for (const auto* t : {&end1, &end2}) {
    ASSERT_TRUE(t->end.Wait(kWait).ok()) << t->end.Wait(kWait);
    ASSERT_TRUE(t->pull.Wait(kWait).ok()) << t->pull.Wait(kWait);
    EXPECT_EQ(t->pull.version(), 1);
  }
  for (int i = 0; i < 500; ++i) ASSERT_EQ(weights1.w[i], -7.0f) << i;
  for (int i = 500; i < 1000; ++i) ASSERT_EQ(weights1.w[i], 0.0f) << i;
  for (float x : weights1.b) ASSERT_EQ(x, 0.0f);
  // Parts must be whole chunks.
  EXPECT_EQ(w1->PushTensorsAndPull(
                  {{0, absl::MakeConstSpan(g1).subspan(50, 100), 50}}, 1, 1, 2,
                  2, weights1.spans())
                .end.Wait(kWait)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The shard's wait threads grow when all of them wait: a pull that waits
// only for its own worker's earlier push is answered while another pull
// holds the only initial thread, waiting for that worker to catch up (with
// a fixed pool it queued behind it until a timeout).
TEST(ParameterClient, WaitingPullsDoNotQueueBehindEachOther) {
  JobSpec spec = Spec(ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(1);
  ParameterServiceOptions service_options;
  service_options.wait_threads = 1;
  service_options.max_wait_threads = 4;
  Cluster cluster(1, spec, service_options);
  // Worker 1 at clock 3 waits for worker 2 to reach clock 2.
  auto w1 = cluster.Client(1);
  Weights weights1;
  Ticket waiting = w1->PullAll(3, 0, weights1.spans());
  EXPECT_EQ(waiting.Wait(absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // Worker 2's push seq 2, whose pull must wait for its push seq 1.
  auto stub = ParameterService::NewStub(grpc::CreateChannel(
      cluster.address(0), grpc::InsecureChannelCredentials()));
  PushRequest second;
  second.set_job_id("job");
  second.set_worker_id(2);
  second.set_seq(2);
  second.mutable_then_pull()->set_clock(1);
  second.mutable_then_pull()->add_chunk_ids(0);
  PushResponse second_response;
  grpc::ClientContext second_context;
  second_context.set_deadline(std::chrono::system_clock::now() +
                              std::chrono::seconds(20));
  absl::Notification answered;
  grpc::Status second_status;
  stub->async()->Push(&second_context, &second, &second_response,
                      [&](grpc::Status s) {
                        second_status = s;
                        answered.Notify();
                      });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(answered.HasBeenNotified());
  PushRequest first;
  first.set_job_id("job");
  first.set_worker_id(2);
  first.set_seq(1);
  PushResponse first_response;
  grpc::ClientContext first_context;
  ASSERT_TRUE(stub->Push(&first_context, first, &first_response).ok());
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(15)));
  EXPECT_TRUE(second_status.ok()) << second_status.error_message();
  EXPECT_TRUE(second_response.pulled());
  EXPECT_FALSE(waiting.Done());  // worker 2 is still at clock 0
  // Worker 2 ends steps 0 and 1: worker 1's pull is answered.
  for (uint64_t seq : {3, 4}) {
    PushRequest end;
    end.set_job_id("job");
    end.set_worker_id(2);
    end.set_seq(seq);
    end.set_clock(seq - 3);
    end.set_end_of_step(true);
    PushResponse end_response;
    grpc::ClientContext end_context;
    ASSERT_TRUE(stub->Push(&end_context, end, &end_response).ok());
  }
  EXPECT_TRUE(waiting.Wait(kWait).ok()) << waiting.Wait(kWait);
}

TEST(ParameterClient, RejectsMismatchedArguments) {
  Cluster cluster(1, Spec(ConsistencySpec::ASP));
  auto client = cluster.Client(1);
  std::vector<float> short_tensor(10);
  EXPECT_EQ(client->PushTensor(0, short_tensor, 0).Wait(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->PushTensor(7, short_tensor, 0).Wait(kWait).code(),
            absl::StatusCode::kInvalidArgument);
  Weights weights;
  EXPECT_EQ(
      client->PullAll(0, 0, {absl::MakeSpan(weights.w)}).Wait(kWait).code(),
      absl::StatusCode::kInvalidArgument);
  ParameterClient::StepTickets bad =
      client->EndStepAndPull({{0, short_tensor}}, 0, 0, 1, 0, weights.spans());
  EXPECT_EQ(bad.end.Wait(kWait).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.pull.Wait(kWait).code(), absl::StatusCode::kInvalidArgument);
  ParameterClientOptions options;
  options.server_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  EXPECT_EQ(ParameterClient::Create(options, "job", 1, cluster.placement())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A server error (here: a worker that is not a member) comes back as is.
  auto stranger = cluster.Client(9);
  EXPECT_EQ(stranger->PullAll(0, 0, weights.spans()).Wait(kWait).code(),
            absl::StatusCode::kFailedPrecondition);
}

// --- Failover: a shard moves to another server without a rollback -------

// A server that takes every call and answers none until it is cancelled or
// the server shuts down: a primary that replicated a push and died before
// answering it (its host gone, so nothing resets the connection).
class BlackHole final : public grpc::CallbackGenericService {
 public:
  BlackHole() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~BlackHole() override {
    server_->Shutdown(std::chrono::system_clock::now());  // cancels the held
  }

  const std::string& address() const { return address_; }
  // Whether `n` requests have come in within `timeout`.
  bool WaitForRequests(int n, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return requests_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new Hold(this);
  }

 private:
  class Hold final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Hold(BlackHole* hole) : hole_(hole) { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) return;
      absl::MutexLock l(&hole_->mu_);
      ++hole_->requests_;
    }
    void OnCancel() override { Finish(grpc::Status::CANCELLED); }
    void OnDone() override { delete this; }

   private:
    BlackHole* const hole_;
    grpc::ByteBuffer request_;
  };

  absl::Mutex mu_;
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

// Retries as a worker's: as long as it takes, backing off to 200 ms.
ParameterClientOptions FailoverOptions(const std::string& address) {
  ParameterClientOptions options;
  options.server_addresses = {address};
  options.call_timeout = absl::Seconds(10);
  options.retry.max_attempts = 1000;
  options.retry.initial_backoff = absl::Milliseconds(20);
  options.retry.max_backoff = absl::Milliseconds(200);
  options.retry.total_deadline = absl::Seconds(20);
  return options;
}

// Shard 0 moves from A to B, which holds what A held (here the same
// worker's session pushed it to B too, as the primary's replication
// would). A push retrying against A, which is down, goes on at B once the
// client is told, as does one issued after: none is dropped or applied
// twice, and each is applied on B.
TEST(ParameterClient, AMovedShardTakesItsCallsToItsNewAddress) {
  const JobSpec spec = Spec(ConsistencySpec::ASP);
  const Placement placement = PlacementOf(spec, 1);
  std::unique_ptr<Shard> a = StartShard(spec, 0, 1);
  std::unique_ptr<Shard> b = StartShard(spec, 0, 1);
  auto client = *ParameterClient::Create(FailoverOptions(a->address), "job", 1,
                                         placement);
  auto replication = *ParameterClient::Create(FailoverOptions(b->address),
                                              "job", 1, placement);
  const std::vector<float> g1(1000, 0.5f), g2(1000, 0.25f), g3(1000, 0.125f);
  ASSERT_TRUE(client->PushTensor(0, g1, 0).Wait(kWait).ok());
  ASSERT_TRUE(replication->PushTensor(0, g1, 0).Wait(kWait).ok());

  a.reset();  // the primary dies
  Ticket retrying = client->PushTensor(0, g2, 0);
  EXPECT_EQ(retrying.Wait(absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded)
      << "retried while A is down";
  ASSERT_TRUE(client->SetServerAddresses({b->address}).ok());
  Ticket after = client->PushTensor(0, g3, 0);
  ASSERT_TRUE(retrying.Wait(kWait).ok()) << retrying.Wait(kWait);
  ASSERT_TRUE(after.Wait(kWait).ok()) << after.Wait(kWait);
  EXPECT_EQ(retrying.duplicates() + after.duplicates(), 0);

  Weights weights;
  ASSERT_TRUE(client->PullAll(1, 0, weights.spans()).Wait(kWait).ok());
  for (float x : weights.w) ASSERT_EQ(x, 2.0f - 0.875f);
  for (float x : weights.b) ASSERT_EQ(x, 2.0f);
  absl::StatusOr<ShardStatus> status = b->store->GetShardStatus("job");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->duplicate_pushes(), 0);
}

// The primary took a push, replicated it and died before answering (a
// black hole: its attempt would wait out the call timeout); the backup that
// takes over holds it. Told of the move, the client sends the push again at
// once, with its sequence number, to the new primary, which answers it as a
// duplicate and applies it once.
TEST(ParameterClient, APushResentToTheNewPrimaryIsAppliedOnce) {
  const JobSpec spec = Spec(ConsistencySpec::ASP);
  const Placement placement = PlacementOf(spec, 1);
  BlackHole a;
  std::unique_ptr<Shard> b = StartShard(spec, 0, 1);
  const ParameterClientOptions options = FailoverOptions(a.address());
  auto client = *ParameterClient::Create(options, "job", 1, placement);
  auto replication = *ParameterClient::Create(FailoverOptions(b->address),
                                              "job", 1, placement);
  const std::vector<float> g(1000, 0.5f);
  ASSERT_TRUE(replication->PushTensor(0, g, 0).Wait(kWait).ok());

  Ticket push = client->PushTensor(0, g, 0);
  ASSERT_TRUE(a.WaitForRequests(1, kWait));
  const absl::Time moved = absl::Now();
  ASSERT_TRUE(client->SetServerAddresses({b->address}).ok());
  ASSERT_TRUE(push.Wait(kWait).ok()) << push.Wait(kWait);
  EXPECT_LT(absl::Now() - moved, options.call_timeout / 2)
      << "sent again at once, not after the attempt's deadline";
  EXPECT_EQ(push.duplicates(), 1);
  absl::StatusOr<ShardStatus> status = b->store->GetShardStatus("job");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->duplicate_pushes(), 1);

  Weights weights;
  ASSERT_TRUE(client->PullAll(1, 0, weights.spans()).Wait(kWait).ok());
  for (float x : weights.w) ASSERT_EQ(x, 1.5f);
  // A wrong count of addresses moves nothing.
  EXPECT_EQ(client->SetServerAddresses({b->address, a.address()}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
