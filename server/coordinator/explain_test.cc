#include "server/coordinator/explain.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ps::coordinator {
namespace {

constexpr int64_t kNow = 1700000100000;

ExplainInput Running(ConsistencySpec::Model model) {
  ExplainInput in;
  in.now_ms = kNow;
  JobRecord& r = in.record;
  r.set_job_id("job-3");
  r.mutable_spec()->set_name("fmnist-bsp");
  r.mutable_spec()->mutable_consistency()->set_model(model);
  r.mutable_spec()->mutable_consistency()->set_barrier_timeout_ms(30000);
  r.mutable_spec()->mutable_consistency()->set_heartbeat_timeout_ms(10000);
  r.set_state(RUNNING);
  r.set_reason("running on 2 worker(s) and 1 shard(s)");
  r.set_start_time_ms(kNow - 60000);
  r.set_global_step(812);
  r.set_total_steps(4680);
  r.add_servers("127.0.0.1:7001");
  for (int rank = 0; rank < 2; ++rank) {
    WorkerSlot* s = r.add_slots();
    s->set_member_id(10 + rank);
    s->set_rank(rank);
    s->add_data_shards(rank);
    s->set_active(true);
    s->set_evaluator(rank == 0);
    s->set_clock(812 - 3 * rank);
    r.add_workers(10 + rank);
    in.workers[10 + rank] = {kNow - 400, 6.5};
  }
  ShardStatus shard;
  shard.set_version(812);
  in.shards.push_back(shard);
  return in;
}

struct Case {
  std::string name;
  ExplainInput in;
  std::vector<std::string> expected;
};

TEST(Explain, SaysWhatBlocksTheJob) {
  std::vector<Case> cases;
  {
    ExplainInput in = Running(ConsistencySpec::BSP);
    ShardStatus& s = *in.shards[0];
    s.set_pending_step(813);
    s.add_waiting_for(11);
    s.set_blocked_pulls(1);
    in.workers[11].last_heartbeat_ms = kNow - 12300;
    cases.push_back(
        {"bsp waits for a silent worker",
         in,
         {"job job-3 \"fmnist-bsp\": RUNNING for 60.0s", "step 812 of ~4680",
          "BSP: each step waits for every active worker; barrier "
          "timeout 30.0s",
          "step 813 waits for worker 11 (rank 1)", "blocked pulls 1",
          "12.3s ago", "3 steps behind",
          "diagnosis: shard 0 holds step 813 for worker 11 (rank "
          "1); worker 11 (rank 1) has been silent for 12.3s"}});
  }
  {
    ExplainInput in = Running(ConsistencySpec::SSP);
    in.record.mutable_spec()->mutable_consistency()->set_staleness(3);
    in.shards[0] = absl::UnavailableError("connection refused");
    in.record.mutable_slots(1)->set_clock(800);
    cases.push_back({"ssp with a shard down",
                     in,
                     {"SSP(3): a worker at clock c waits until every active "
                      "worker reached c - 3",
                      "UNREACHABLE: connection refused",
                      "diagnosis: shard 0 does not answer",
                      "workers at clock 812 wait for worker 11 (rank 1) at "
                      "clock 800 (staleness bound 3)"}});
  }
  {
    ExplainInput in = Running(ConsistencySpec::ASP);
    cases.push_back(
        {"asp moving",
         in,
         {"ASP: no staleness bound", "6.50", "diagnosis: nothing is blocked"}});
  }
  {
    ExplainInput in = Running(ConsistencySpec::ASP);
    SparseTableStatus* t = in.shards[0]->add_sparse_tables();
    t->set_name("emb");
    t->set_rows(1000);
    t->set_capacity(1000);
    t->set_bytes(3 << 20);
    t->set_rows_pushed(5000);
    t->set_dropped_gradients(7);
    cases.push_back(
        {"a full sparse table",
         in,
         {"sparse table emb: 1000 rows of 1000, 3 MiB, rows pushed 5000",
          "gradients dropped 7",
          "diagnosis: sparse table emb is full on shard 0 and evicts "
          "nothing"}});
  }
  {
    ExplainInput in = Running(ConsistencySpec::ASP);
    ShardStatus& s = *in.shards[0];
    s.set_replica_role(SetupJobRequest::PRIMARY);
    s.set_replica_epoch(2);
    s.set_replica_index(120);
    ShardStatus::Backup* b = s.add_backups();
    b->set_address("127.0.0.1:7002");
    b->set_acked_index(117);
    b->set_last_error("UNAVAILABLE: connection refused");
    cases.push_back(
        {"a replicated shard whose backup does not answer",
         in,
         {"replicas: epoch 2, 120 changes, backups 127.0.0.1:7002 behind by 3 "
          "(UNAVAILABLE: connection refused)",
          "diagnosis: shard 0's backup 127.0.0.1:7002 does not answer"}});
  }
  {
    // A link cut: the call hangs, no error yet.
    ExplainInput in = Running(ConsistencySpec::BSP);
    ShardStatus& s = *in.shards[0];
    s.set_replica_role(SetupJobRequest::PRIMARY);
    s.set_replica_epoch(1);
    s.set_replica_index(40);
    ShardStatus::Backup* b = s.add_backups();
    b->set_address("198.18.0.3:7002");
    b->set_acked_index(39);
    b->set_unanswered_ms(2500);
    cases.push_back(
        {"a replicated shard whose backup is cut off",
         in,
         {"backups 198.18.0.3:7002 behind by 1, no answer for 2.5s",
          "diagnosis: shard 0's backup 198.18.0.3:7002 does not answer"}});
  }
  {
    // The VM: one worker's OpenBLAS on its generic core.
    ExplainInput in = Running(ConsistencySpec::BSP);
    in.members[10].set_blas_core("SkylakeX");
    in.members[10].set_gemm_gflops(181);
    in.members[11].set_blas_core("Prescott");
    in.members[11].set_gemm_gflops(35);
    cases.push_back(
        {"a worker with a slow BLAS",
         in,
         {"GEMM GF/s  BLAS core", "181.0  SkylakeX", "35.0  Prescott",
          "diagnosis: worker 11 (rank 1) computes GEMM at 35.0 GFLOP/s, under "
          "half the fastest worker's 181.0 (BLAS core Prescott against "
          "SkylakeX): a slow device or BLAS makes it a straggler"}});
  }
  {
    // Within 2x of each other: nothing to say.
    ExplainInput in = Running(ConsistencySpec::ASP);
    in.members[10].set_gemm_gflops(100);
    in.members[11].set_gemm_gflops(60);
    cases.push_back({"workers of similar speed",
                     in,
                     {"100.0", "60.0", "diagnosis: nothing is blocked"}});
  }
  {
    ExplainInput in;
    in.now_ms = kNow;
    in.record.set_job_id("job-4");
    in.record.set_state(PENDING);
    in.record.set_submit_time_ms(kNow - 5000);
    in.record.set_reason("waiting for a parameter server to register");
    JobEvent e;
    e.set_time_ms(kNow - 5000);
    e.set_kind("state");
    e.set_message("submitted");
    in.recent_events.push_back(e);
    cases.push_back({"pending",
                     in,
                     {"PENDING for 5.0s", "recent events:", "state: submitted",
                      "diagnosis: not started: waiting for a parameter "
                      "server"}});
  }
  for (const Case& c : cases) {
    const std::string text = FormatExplanation(c.in);
    for (const std::string& e : c.expected) {
      EXPECT_NE(text.find(e), std::string::npos)
          << c.name << ": no \"" << e << "\" in\n"
          << text;
    }
  }
}

}  // namespace
}  // namespace ps::coordinator
