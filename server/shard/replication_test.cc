// Replicated shards in one process: a primary's router feeding a backup's
// router through a link that calls it directly. Under concurrent workers
// the backup ends bit for bit where the primary is (weights, Adam moments,
// step counts, sparse rows with their slots, versions), also one built by
// a state transfer mid-job; answers wait for the backup; a promoted backup
// answers a retried push as a duplicate; a deposed primary is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/platform/fake_clock.h"
#include "common/platform/file_system.h"
#include "common/platform/metrics.h"
#include "common/wire/checkpoint.h"
#include "server/shard/replica_entry.h"
#include "server/shard/replicated_shard.h"
#include "server/shard/shard_router.h"
#include "server/shard/shard_test_util.h"

namespace ps::server {
namespace {

constexpr int kDim = 4;

// MakeSpec's tensors with Adam, and table "emb" (dim 4, lazy Adam, at most
// 24 rows, LRU), so that the copies must agree on moments, per-row step
// counts and which rows were evicted.
JobSpec ReplicatedSpec(ConsistencySpec::Model model) {
  JobSpec spec = MakeSpec(model);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  SparseTableSpec* emb = spec.mutable_model()->add_sparse_tables();
  emb->set_name("emb");
  emb->set_dim(kDim);
  emb->set_capacity(24);
  emb->set_eviction(SparseTableSpec::LRU);
  *emb->mutable_optimizer() = spec.optimizer();
  spec.mutable_replication()->set_factor(2);
  return spec;
}

// Servers by address, reached by links that call their router.
class Net {
 public:
  class Link final : public ReplicaLink {
   public:
    Link(Net* net, std::string address)
        : net_(net), address_(std::move(address)) {}
    absl::StatusOr<ReplicateResponse> Send(const ReplicateRequest& request,
                                           absl::Time) override {
      {
        absl::MutexLock l(&net_->gate_mu_);
        net_->gate_mu_.Await(absl::Condition(&net_->open_));
      }
      ShardRouter* to = net_->Find(address_);
      if (to == nullptr) return absl::UnavailableError("connection refused");
      ++net_->sends_;
      return to->Replicate(request);
    }
    const std::string& address() const override { return address_; }

   private:
    Net* const net_;
    const std::string address_;
  };

  std::unique_ptr<ShardRouter> NewServer(const std::string& address,
                                         MetricsRegistry* metrics = nullptr) {
    const std::string dir = TempDir("replica-" + address);
    auto router = ShardRouter::Create(
        [this, dir]() -> absl::StatusOr<std::unique_ptr<ShardStore>> {
          return NewStore(&clock_, dir);
        },
        [this](const std::string& to) -> std::unique_ptr<ReplicaLink> {
          return std::make_unique<Link>(this, to);
        },
        metrics);
    EXPECT_TRUE(router.ok()) << router.status();
    absl::MutexLock l(&mu_);
    servers_.emplace_back(address, router->get());
    return *std::move(router);
  }
  // The server at `address` is gone (its links are refused).
  void Kill(const std::string& address) {
    absl::MutexLock l(&mu_);
    for (auto& s : servers_) {
      if (s.first == address) s.second = nullptr;
    }
  }
  ShardRouter* Find(const std::string& address) {
    absl::MutexLock l(&mu_);
    for (auto& s : servers_) {
      if (s.first == address) return s.second;
    }
    return nullptr;
  }
  // Sends wait until Open (a backup that does not answer yet).
  void Close() {
    absl::MutexLock l(&gate_mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock l(&gate_mu_);
    open_ = true;
  }
  int sends() const { return sends_; }

 private:
  FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, ShardRouter*>> servers_;
  absl::Mutex gate_mu_;
  bool open_ ABSL_GUARDED_BY(gate_mu_) = true;
  std::atomic<int> sends_{0};
};

SetupJobRequest RoleSetup(const JobSpec& spec, std::vector<int64_t> workers,
                          SetupJobRequest::ReplicaRole role,
                          std::vector<std::string> backups = {},
                          int64_t epoch = 1, int shard = 0,
                          int num_shards = 1) {
  SetupJobRequest r = JobSetup(spec, std::move(workers), shard, num_shards);
  r.set_replica_role(role);
  r.set_replica_epoch(epoch);
  for (const std::string& b : backups) r.add_backup_addresses(b);
  return r;
}

// A push of worker `w`'s gradient for `step` to every dense chunk and to
// the rows of 6 keys out of 40 (drawn from w and step), values varying so
// that the moments differ by key and chunk.
absl::StatusOr<PushResult> PushStep(ShardStore& store, int64_t w, uint64_t seq,
                                    int64_t step, bool end_of_step,
                                    bool final = false) {
  auto placement = store.GetPlacement("job1");
  if (!placement.ok()) return placement.status();
  PushArgs args = PushHeader(w, seq, step, step, end_of_step);
  args.chunks_final = final;
  std::vector<std::vector<float>> buffers;
  buffers.reserve((*placement)->chunks.size());
  for (const Chunk& c : (*placement)->chunks) {
    std::vector<float>& g = buffers.emplace_back(c.num_elements);
    for (int64_t i = 0; i < c.num_elements; ++i) {
      g[i] = 0.01f * static_cast<float>((w * 7 + step * 3 + i) % 11) - 0.05f;
    }
    args.chunks.push_back(
        Contiguous(c.chunk_id, FLOAT32, c.num_elements,
                   absl::string_view(reinterpret_cast<const char*>(g.data()),
                                     g.size() * sizeof(float))));
  }
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 6; ++k) {
    const uint64_t key = (w * 13 + step * 5 + k * 7) % 40;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(key);
    }
  }
  std::vector<float> rows(keys.size() * kDim);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = 0.1f * static_cast<float>((i + w + step) % 5) - 0.2f;
  }
  SparseRowsView v;
  v.table = 0;
  v.dtype = FLOAT32;
  v.num_rows = static_cast<int64_t>(keys.size());
  v.dim = kDim;
  v.keys = keys;
  v.rows = absl::string_view(reinterpret_cast<const char*>(rows.data()),
                             rows.size() * sizeof(float));
  args.sparse.push_back(v);
  return store.Push(args, Far());
}

// A pull of the rows of 5 keys (creating, touching and evicting rows).
absl::Status PullKeys(ShardStore& store, int64_t w, int64_t step,
                      int64_t min_version) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 5; ++k) keys.push_back((w * 3 + step + k * 9) % 40);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  PullArgs args;
  args.job_id = "job1";
  args.worker_id = w;
  args.clock = step;
  args.min_version = min_version;
  args.sparse_only = true;
  SparseRowsView v;
  v.table = 0;
  v.num_rows = static_cast<int64_t>(keys.size());
  v.keys = keys;
  args.sparse.push_back(v);
  std::string out;
  auto rows = [&](size_t, DType d, int32_t dim, int64_t n) {
    out.resize(n * dim * DTypeSize(d));
    return out.data();
  };
  const SparseSink sink = rows;
  return store
      .PullWithRows(
          args, Far(),
          [](const Chunk&, absl::Span<const float>, const WeightsRef&) {},
          &sink)
      .status();
}

// The job's state on `store`, read back from a checkpoint, sparse rows
// sorted by key.
CheckpointData StateOf(ShardStore& store) {
  auto written = store.Checkpoint("job1");
  EXPECT_TRUE(written.ok()) << written.status();
  auto data = ReadCheckpoint(FileSystem::Posix(), written->path());
  EXPECT_TRUE(data.ok()) << data.status();
  for (CheckpointSparseTable& t : data->sparse_tables) {
    std::vector<size_t> order(t.keys.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return t.keys[a] < t.keys[b]; });
    CheckpointSparseTable sorted = t;
    for (size_t i = 0; i < order.size(); ++i) {
      sorted.keys[i] = t.keys[order[i]];
      sorted.steps[i] = t.steps[order[i]];
      std::copy_n(t.values.begin() + order[i] * t.row_floats, t.row_floats,
                  sorted.values.begin() + i * t.row_floats);
    }
    t = sorted;
  }
  return *data;
}

void ExpectSameState(const CheckpointData& a, const CheckpointData& b) {
  EXPECT_EQ(a.version, b.version);
  ASSERT_EQ(a.ranges.size(), b.ranges.size());
  for (size_t i = 0; i < a.ranges.size(); ++i) {
    EXPECT_EQ(a.ranges[i].weights, b.ranges[i].weights) << i;
    EXPECT_EQ(a.ranges[i].slot1, b.ranges[i].slot1) << i;
    EXPECT_EQ(a.ranges[i].slot2, b.ranges[i].slot2) << i;
    EXPECT_EQ(a.ranges[i].steps, b.ranges[i].steps) << i;
  }
  ASSERT_EQ(a.sparse_tables.size(), b.sparse_tables.size());
  for (size_t i = 0; i < a.sparse_tables.size(); ++i) {
    EXPECT_EQ(a.sparse_tables[i].keys, b.sparse_tables[i].keys);
    EXPECT_EQ(a.sparse_tables[i].steps, b.sparse_tables[i].steps);
    EXPECT_EQ(a.sparse_tables[i].values, b.sparse_tables[i].values);
  }
}

// ASP workers 1..`workers` on threads, each pulling rows and pushing its
// steps [from, to) to `primary` (seq = step + 1); join them.
std::vector<std::thread> AspWorkers(ShardStore& primary, int workers,
                                    int64_t from, int64_t to) {
  std::vector<std::thread> threads;
  for (int64_t w = 1; w <= workers; ++w) {
    threads.emplace_back([&primary, w, from, to] {
      for (int64_t step = from; step < to; ++step) {
        ASSERT_TRUE(PullKeys(primary, w, step, 0).ok());
        auto r = PushStep(primary, w, step + 1, step, true);
        ASSERT_TRUE(r.ok()) << r.status();
      }
    });
  }
  return threads;
}

// Concurrent ASP workers: the backup, promoted, holds the primary's state
// bit for bit, and every acknowledged push is on it.
TEST(Replication, AspBackupHoldsThePrimarysStateBitForBit) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::BACKUP)).ok());
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::PRIMARY, {"b"}))
          .ok());
  // Workers' calls to the backup are refused: the primary answers them.
  auto refused = PushStep(*b, 1, 1, 0, true);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "backup"));

  for (auto& t : AspWorkers(*a, 3, 0, 30)) t.join();
  auto status = a->GetShardStatus("job1", 0);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->replica_role(), SetupJobRequest::PRIMARY);
  EXPECT_EQ(status->replica_index(), 180);  // 90 pulls, 90 pushes
  ASSERT_EQ(status->backups_size(), 1);
  EXPECT_EQ(status->backups(0).acked_index(), 180);

  // The primary dies; the backup is promoted and goes on from there.
  net.Kill("a");
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::PRIMARY, {}, 2))
          .ok());
  ExpectSameState(StateOf(*a), StateOf(*b));
  EXPECT_EQ(Version(*b), 90);
  // A worker that did not see its last push acknowledged sends it again:
  // applied once.
  auto again = PushStep(*b, 2, 30, 29, true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->duplicate);
  auto next = PushStep(*b, 2, 31, 30, true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->duplicate);
  EXPECT_EQ(Version(*b), 91);
}

// BSP with chunks applied as they complete and steps closing on the last
// end of step: the backup takes the same steps.
TEST(Replication, BspBackupTakesTheSameSteps) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::BSP);
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::BACKUP)).ok());
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {"b"}))
          .ok());
  std::vector<std::thread> workers;
  for (int64_t w = 1; w <= 2; ++w) {
    workers.emplace_back([&, w] {
      uint64_t seq = 0;
      for (int64_t step = 0; step < 20; ++step) {
        ASSERT_TRUE(PullKeys(*a, w, step, step).ok());
        auto r = PushStep(*a, w, ++seq, step, false, /*final=*/true);
        ASSERT_TRUE(r.ok()) << r.status();
        auto end = PushStep(*a, w, ++seq, step, true);
        ASSERT_TRUE(end.ok()) << end.status();
      }
    });
  }
  for (auto& t : workers) t.join();
  net.Kill("a");
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {}, 2))
          .ok());
  EXPECT_EQ(Version(*a), 20);
  ExpectSameState(StateOf(*a), StateOf(*b));
}

// Waits until `server`'s primary of shard 0 has every backup in sync
// (a state transfer done) and holding every entry it made.
void AwaitBackupsInSync(ShardRouter& server, int want) {
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (absl::Now() < until) {
    auto status = server.GetShardStatus("job1", 0);
    ASSERT_TRUE(status.ok()) << status.status();
    bool done = status->backups_size() == want;
    for (const auto& b : status->backups()) {
      done =
          done && !b.building() && b.acked_index() == status->replica_index();
    }
    if (done) return;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ADD_FAILURE() << "backups not in sync: "
                << server.GetShardStatus("job1", 0)->DebugString();
}

// ReplicatedSpec with an admission filter on "emb": a key gets a row at
// its fourth push (a backup that started counting afresh would create its
// rows later than the primary); 36 rows of the 40 keys, so that rows live
// long and an LRU order that differs shows in the rows kept.
JobSpec AdmittingSpec(ConsistencySpec::Model model) {
  JobSpec spec = ReplicatedSpec(model);
  SparseTableSpec* emb = spec.mutable_model()->mutable_sparse_tables(0);
  emb->set_capacity(36);
  AdmissionSpec* admission = emb->mutable_admission();
  admission->set_min_count(4);
  admission->set_sketch_width(4096);
  admission->set_sketch_depth(2);
  return spec;
}

// A backup added to a running ASP shard is built by a state transfer and
// then follows the log: promoted, it holds the primary's state bit for bit
// (its LRU order, admission counts and sequence numbers came with the
// image, or the evictions and rows after it would differ).
TEST(Replication, ABackupAddedMidJobIsBuiltByAStateTransfer) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  auto c = net.NewServer("c");
  const JobSpec spec = AdmittingSpec(ConsistencySpec::ASP);
  // Each worker joined once (UpdateMembershipRequest.worker_joins).
  auto joined_once = [](SetupJobRequest r) {
    for (int i = 0; i < r.worker_ids_size(); ++i) r.add_worker_joins(1);
    return r;
  };
  ASSERT_TRUE(b->SetupJob(joined_once(RoleSetup(spec, {1, 2, 3},
                                                SetupJobRequest::BACKUP)))
                  .ok());
  ASSERT_TRUE(
      a->SetupJob(joined_once(RoleSetup(spec, {1, 2, 3},
                                        SetupJobRequest::PRIMARY, {"b"})))
          .ok());
  for (auto& t : AspWorkers(*a, 3, 0, 15)) t.join();
  // The coordinator sets c up as a backup and gives the primary both; c's
  // transfer runs while the workers go on.
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::BACKUP)).ok());
  std::vector<std::thread> workers = AspWorkers(*a, 3, 15, 20);
  ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::PRIMARY,
                                    {"b", "c"}))
                  .ok());
  for (auto& t : workers) t.join();
  AwaitBackupsInSync(*a, 2);
  // A few steps more, fewer than the rows' turnover: a row, recency or
  // admission count missing from the image would still show.
  for (auto& t : AspWorkers(*a, 3, 20, 23)) t.join();
  AwaitBackupsInSync(*a, 2);

  net.Kill("a");
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2, 3}, SetupJobRequest::PRIMARY, {}, 2))
          .ok());
  ExpectSameState(StateOf(*a), StateOf(*c));
  EXPECT_EQ(Version(*c), 69);
  auto again = PushStep(*c, 3, 23, 22, true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->duplicate);
  // The image carried how often each worker joined (c's promotion did not
  // say): one that rejoined unseen starts over here too.
  UpdateMembershipRequest m;
  m.set_job_id("job1");
  m.set_membership_epoch(7);
  for (int64_t w : {1, 2, 3}) {
    m.add_worker_ids(w);
    m.add_worker_joins(w == 3 ? 2 : 1);
  }
  ASSERT_TRUE(c->UpdateMembership(m).ok());
  auto fresh = PushStep(*c, 3, 1, 23, true);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(fresh->duplicate);
}

// Under BSP the image waits for a step's close (nothing staged), however
// the transfer falls between the workers' pushes.
TEST(Replication, ABspStateTransferTakesTheImageBetweenSteps) {
  Net net;
  auto a = net.NewServer("a");
  auto c = net.NewServer("c");
  const JobSpec spec = AdmittingSpec(ConsistencySpec::BSP);
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY)).ok());
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::BACKUP)).ok());
  std::atomic<int> steps_done{0};
  std::vector<std::thread> workers;
  for (int64_t w = 1; w <= 2; ++w) {
    workers.emplace_back([&, w] {
      uint64_t seq = 0;
      for (int64_t step = 0; step < 20; ++step) {
        ASSERT_TRUE(PullKeys(*a, w, step, step).ok());
        auto r = PushStep(*a, w, ++seq, step, false, /*final=*/true);
        ASSERT_TRUE(r.ok()) << r.status();
        if (w == 1 && step == 6) {
          // Mid-step: worker 1 pushed, worker 2 may not have.
          ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1, 2},
                                            SetupJobRequest::PRIMARY, {"c"}))
                          .ok());
        }
        auto end = PushStep(*a, w, ++seq, step, true);
        ASSERT_TRUE(end.ok()) << end.status();
        ++steps_done;
      }
    });
  }
  for (auto& t : workers) t.join();
  AwaitBackupsInSync(*a, 1);
  net.Kill("a");
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {}, 2))
          .ok());
  EXPECT_EQ(Version(*c), 20);
  ExpectSameState(StateOf(*a), StateOf(*c));
}

// Factor 3: the promoted backup gives the other one a state transfer (it
// followed the old primary's log), so the shard keeps two copies and a
// second failover loses nothing either.
TEST(Replication, APromotedPrimaryRebuildsTheOtherBackup) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  auto c = net.NewServer("c");
  JobSpec spec = AdmittingSpec(ConsistencySpec::ASP);
  spec.mutable_replication()->set_factor(3);
  for (ShardRouter* s : {b.get(), c.get()}) {
    ASSERT_TRUE(
        s->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::BACKUP)).ok());
  }
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {"b", "c"}))
          .ok());
  for (auto& t : AspWorkers(*a, 2, 0, 10)) t.join();
  net.Kill("a");
  // The coordinator's failover: c follows the new epoch, b is promoted
  // with c as its backup.
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::BACKUP, {}, 2))
          .ok());
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {"c"}, 2))
          .ok());
  for (auto& t : AspWorkers(*b, 2, 10, 20)) t.join();
  AwaitBackupsInSync(*b, 1);
  net.Kill("b");
  ASSERT_TRUE(
      c->SetupJob(RoleSetup(spec, {1, 2}, SetupJobRequest::PRIMARY, {}, 3))
          .ok());
  EXPECT_EQ(Version(*c), 40);
  ExpectSameState(StateOf(*b), StateOf(*c));
}

// The replica gauges: each server's role and epoch per shard, a primary's
// backups in sync or building and its farthest backup's lag; a shard torn
// down reads 0.
TEST(Replication, ReplicaGaugesShowRolesBackupsAndLag) {
  MetricsRegistry ma, mb;
  Net net;
  auto a = net.NewServer("a", &ma);
  auto b = net.NewServer("b", &mb);
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(b->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::BACKUP)).ok());
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {"b"})).ok());
  ASSERT_TRUE(PushStep(*a, 1, 1, 0, true).ok());
  const std::string labels = "{job=\"job1\",shard=\"0\"}";
  std::string text = ma.TextSnapshot();
  EXPECT_TRUE(absl::StrContains(text, "ps_shard_replica_role" + labels + " 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "ps_shard_replica_epoch" + labels + " 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text,
      "ps_shard_replica_backups{job=\"job1\",shard=\"0\",state=\"in_sync\"} 1"))
      << text;
  EXPECT_TRUE(
      absl::StrContains(text, "ps_shard_replica_lag_entries" + labels + " 0"))
      << text;
  EXPECT_TRUE(absl::StrContains(mb.TextSnapshot(),
                                "ps_shard_replica_role" + labels + " 2"))
      << mb.TextSnapshot();
  // A backup that does not answer: the primary's lag shows it.
  net.Close();
  std::thread pusher([&] { (void)PushStep(*a, 1, 2, 1, true); });
  absl::SleepFor(absl::Milliseconds(100));
  text = ma.TextSnapshot();
  EXPECT_TRUE(
      absl::StrContains(text, "ps_shard_replica_lag_entries" + labels + " 1"))
      << text;
  net.Open();
  pusher.join();
  TeardownJobRequest down;
  down.set_job_id("job1");
  ASSERT_TRUE(a->TeardownJob(down).ok());
  EXPECT_TRUE(absl::StrContains(ma.TextSnapshot(),
                                "ps_shard_replica_role" + labels + " 0"))
      << ma.TextSnapshot();
}

// A push and a pull are answered only once the backup holds what they
// reflect; dropping the backup releases them.
TEST(Replication, AnswersWaitForTheBackup) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(b->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::BACKUP)).ok());
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {"b"})).ok());
  net.Close();
  absl::Notification pushed;
  std::thread pusher([&] {
    auto r = PushStep(*a, 1, 1, 0, true);
    EXPECT_TRUE(r.ok()) << r.status();
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  // The primary reports how long it has waited (what the coordinator's
  // --backup_timeout_ms reads), and nothing once the backup answers.
  auto waiting = a->GetShardStatus("job1", 0);
  ASSERT_TRUE(waiting.ok());
  ASSERT_EQ(waiting->backups_size(), 1);
  EXPECT_GE(waiting->backups(0).unanswered_ms(), 250);
  net.Open();
  EXPECT_TRUE(pushed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  pusher.join();
  auto answered = a->GetShardStatus("job1", 0);
  ASSERT_TRUE(answered.ok());
  EXPECT_EQ(answered->backups(0).unanswered_ms(), 0);

  // A backup that is gone holds answers back until the coordinator drops
  // it (a repeated setup without it).
  net.Kill("b");
  absl::Notification pushed2;
  std::thread pusher2([&] {
    auto r = PushStep(*a, 1, 2, 1, true);
    EXPECT_TRUE(r.ok()) << r.status();
    pushed2.Notify();
  });
  EXPECT_FALSE(pushed2.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY)).ok());
  EXPECT_TRUE(pushed2.WaitForNotificationWithTimeout(absl::Seconds(10)));
  pusher2.join();
  EXPECT_EQ(Version(*a), 2);
  auto status = a->GetShardStatus("job1", 0);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->backups_size(), 0);
}

// After a promotion the old primary's entries are refused, so it can never
// acknowledge another push (no two primaries).
TEST(Replication, ADeposedPrimaryIsRefused) {
  Net net;
  auto a = net.NewServer("a");
  auto b = net.NewServer("b");
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(b->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::BACKUP)).ok());
  ASSERT_TRUE(
      a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {"b"})).ok());
  ASSERT_TRUE(PushStep(*a, 1, 1, 0, true).ok());
  ASSERT_TRUE(
      b->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {}, 2)).ok());
  // The old primary (partitioned, not dead) takes a push: not acknowledged.
  auto late = [&] {
    PushArgs args = PushHeader(1, 2, 1, 1, true);
    return a->Push(args, absl::Now() + absl::Milliseconds(500));
  }();
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(late.status().message(), "promoted"))
      << late.status();
  ReplicateRequest stale;
  stale.set_job_id("job1");
  stale.set_shard(0);
  stale.set_replica_epoch(1);
  EXPECT_EQ(b->Replicate(stale).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A change the backup answers otherwise than the primary did (here a push
// from a worker that is not a member, which the primary is said to have
// taken) is counted in the server's metrics: the copies may differ.
TEST(Replication, ABackupCountsAChangeItAnsweredOtherwise) {
  MetricsRegistry metrics;
  Net net;
  auto b = net.NewServer("b", &metrics);
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(b->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::BACKUP)).ok());
  ReplicateRequest r;
  r.set_job_id("job1");
  r.set_shard(0);
  r.set_replica_epoch(1);
  ReplicaEntry* e = r.add_entries();
  e->set_index(1);
  e->set_code(0);  // OK on the primary
  e->mutable_push()->set_job_id("job1");
  e->mutable_push()->set_worker_id(99);
  e->mutable_push()->set_seq(1);
  ASSERT_TRUE(b->Replicate(r).ok());
  const std::string counted =
      "shard_replica_mismatches_total{job=\"job1\",shard=\"0\"} 1";
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!absl::StrContains(metrics.TextSnapshot(), counted) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(absl::StrContains(metrics.TextSnapshot(), counted))
      << metrics.TextSnapshot();
}

// One server holding two shards of a job (a backup promoted beside its own
// primary): calls name their shard.
TEST(Replication, TwoShardsOfAJobOnOneServerAreToldApartByShard) {
  Net net;
  auto a = net.NewServer("a");
  const JobSpec spec = ReplicatedSpec(ConsistencySpec::ASP);
  ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {}, 1,
                                    /*shard=*/0, /*num_shards=*/2))
                  .ok());
  ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::BACKUP, {}, 1,
                                    /*shard=*/1, /*num_shards=*/2))
                  .ok());
  // Without a shard the call goes to the one primary.
  EXPECT_EQ(a->GetShardStatus("job1")->shard_index(), 0);
  ASSERT_TRUE(a->SetupJob(RoleSetup(spec, {1}, SetupJobRequest::PRIMARY, {}, 2,
                                    /*shard=*/1, /*num_shards=*/2))
                  .ok());
  PushArgs args = PushHeader(1, 1, 0, 0, true);
  auto ambiguous = a->Push(args, Far());
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kInvalidArgument);
  args.shard = 1;
  ASSERT_TRUE(a->Push(args, Far()).ok());
  EXPECT_EQ(a->GetShardStatus("job1", 1)->version(), 1);
  EXPECT_EQ(a->GetShardStatus("job1", 0)->version(), 0);
  args.shard = 2;
  EXPECT_EQ(a->Push(args, Far()).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ps::server
