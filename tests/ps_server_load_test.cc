// Load: 16 client threads push and pull concurrently through real gRPC
// (worker/client/parameter_client.h) to one real ps_server for a bounded time
// (ASP, SGD with learning rate 1). Gradients are powers of two, so the sum
// is exact in float: the final weights must equal the initial ones minus
// every acknowledged push, i.e. no update is lost or applied twice. Every
// wait is bounded (a deadlock fails the test instead of hanging it), and
// the server's resident memory must not keep growing under the steady load.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/platform/rpc.h"
#include "common/wire/placement.h"
#include "proto/parameter_service.grpc.pb.h"
#include "tests/ps_server_process.h"
#include "worker/client/parameter_client.h"

namespace ps {
namespace {

using client::ParameterClient;
using client::ParameterClientOptions;
using client::Ticket;

constexpr int kThreads = 16;
constexpr absl::Duration kLoadTime = absl::Seconds(30);
constexpr absl::Duration kWait = absl::Seconds(30);
constexpr int kElements = 3000;
// 2^-10: every partial sum below 2^13 is exact in float.
constexpr float kUnit = 1.0f / 1024;

// VmRSS of `pid` in KiB, or -1.
int64_t RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kb = -1;
      in >> kb;
      return kb;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

TEST(PsServerLoad, SixteenThreadsLoseNoUpdateAndMemoryStaysBounded) {
  auto server = testing::ServerProcess::Start({"--threads=8"});
  ASSERT_TRUE(server.ok()) << server.status();
  JobSpec spec;
  spec.set_name("load");
  spec.set_chunk_bytes(4096);
  spec.set_num_workers(kThreads);
  TensorSpec* t = spec.mutable_model()->add_tensors();
  t->set_name("w");
  t->add_shape(kElements);
  t->mutable_init()->set_kind(InitializerSpec::CONSTANT);
  t->mutable_init()->set_value(0.0f);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(ConsistencySpec::ASP);
  spec.mutable_data()->set_max_steps(1 << 30);
  std::vector<TensorSpec> tensors(spec.model().tensors().begin(),
                                  spec.model().tensors().end());
  const Placement placement = *ComputePlacement(tensors, 1, 4096);
  {
    auto stub = ParameterService::NewStub(*MakeChannel((*server)->address()));
    SetupJobRequest r;
    r.set_job_id("load");
    *r.mutable_spec() = spec;
    r.set_num_shards(1);
    for (int w = 1; w <= kThreads; ++w) r.add_worker_ids(w);
    SetupJobResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, kWait, "");
    ASSERT_TRUE(stub->SetupJob(&ctx, r, &resp).ok());
  }

  const absl::Time start = absl::Now();
  const absl::Time end = start + kLoadTime;
  std::vector<int64_t> pushes(kThreads + 1, 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 1; w <= kThreads; ++w) {
    threads.emplace_back([&, w] {
      ParameterClientOptions o;
      o.server_addresses = {(*server)->address()};
      o.max_request_bytes = 4096;  // several messages per push
      auto client = ParameterClient::Create(o, "load", w, placement);
      if (!client.ok()) {
        failures++;
        return;
      }
      // Thread w pushes w units per element: the total is checkable.
      const std::vector<float> grad(kElements, w * kUnit);
      std::vector<float> weights(kElements);
      for (int64_t step = 0; absl::Now() < end; ++step) {
        if (step % 8 == 0) {
          Ticket pull = (*client)->PullAll(step, 0, {absl::MakeSpan(weights)});
          if (!pull.Wait(kWait).ok()) {
            failures++;
            return;
          }
        }
        Ticket push = (*client)->PushTensor(0, grad, step, 0);
        Ticket done = (*client)->EndStep(step, 0);
        if (!push.Wait(kWait).ok() || !done.Wait(kWait).ok()) {
          failures++;
          return;
        }
        pushes[w]++;
      }
    });
  }
  // Resident memory after warm-up and at the end of the load.
  absl::SleepFor(kLoadTime / 4);
  const int64_t rss_warm = RssKb((*server)->pid());
  for (auto& th : threads) th.join();
  const int64_t rss_end = RssKb((*server)->pid());
  EXPECT_LT(absl::Now() - end, kWait) << "a thread hung past its waits";
  ASSERT_EQ(failures.load(), 0);

  int64_t units = 0, total = 0;
  for (int w = 1; w <= kThreads; ++w) {
    units += pushes[w] * w;
    total += pushes[w];
    EXPECT_GT(pushes[w], 0) << "thread " << w << " made no progress";
  }
  std::printf(
      "load: %lld pushes in %.1f s (%.0f/s); server RSS %lld KiB -> "
      "%lld KiB\n",
      static_cast<long long>(total), absl::ToDoubleSeconds(kLoadTime),
      total / absl::ToDoubleSeconds(kLoadTime),
      static_cast<long long>(rss_warm), static_cast<long long>(rss_end));
  ASSERT_LT(units * kUnit, 8192.0) << "sum no longer exact in float";

  ParameterClientOptions o;
  o.server_addresses = {(*server)->address()};
  auto reader = ParameterClient::Create(o, "load", 1, placement);
  ASSERT_TRUE(reader.ok());
  std::vector<float> final_weights(kElements, 1.0f);
  ASSERT_TRUE((*reader)
                  ->PullAll(0, 0, {absl::MakeSpan(final_weights)})
                  .Wait(kWait)
                  .ok());
  const float expected = -static_cast<float>(units) * kUnit;
  for (int i = 0; i < kElements; ++i) {
    ASSERT_EQ(final_weights[i], expected) << "element " << i;
  }
  ASSERT_GT(rss_warm, 0);
  // Steady load, steady memory: at most 64 MiB more than after warm-up.
  EXPECT_LT(rss_end, rss_warm + 64 * 1024)
      << "server RSS grew from " << rss_warm << " to " << rss_end << " KiB";
}

}  // namespace
}  // namespace ps
