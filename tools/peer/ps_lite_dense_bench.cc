// Dense push/pull driver over ps-lite's KVWorker::ZPush / ZPull.
// Each worker: keys spread evenly over the key space (so over the servers),
// each with an equal share of the model's floats; a step is ZPush, Wait,
// ZPull, Wait. The server adds pushed values into its store and answers a
// pull with a copy of them.
//
// Environment (besides ps-lite's DMLC_*): BENCH_BYTES (model bytes),
// BENCH_SECONDS (measuring time), BENCH_KEYS (keys, default 4 per server).
// Each worker prints: worker RANK bytes B steps N seconds S gbps G steps_per_s
// R
//   cpu_user U cpu_sys Y
//
// Not part of this repository's build: build_ps_lite.sh compiles it against a
// ps-lite checkout, run_ps_lite.sh runs it (docs/performance/
// ps-bench.md, "Throughput"). It is the peer's program, so it reads its
// settings from the environment as ps-lite does.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

using namespace ps;

namespace {

struct Store {
  std::mutex mu;
  std::unordered_map<Key, std::vector<float>> values;
};

void Handle(Store* store, const KVMeta& meta, const KVPairs<float>& req,
            KVServer<float>* server) {
  KVPairs<float> res;
  size_t n = req.keys.size();
  if (meta.push) {
    size_t off = 0;
    std::lock_guard<std::mutex> l(store->mu);
    for (size_t i = 0; i < n; ++i) {
      size_t len = req.lens.empty() ? req.vals.size() / n : req.lens[i];
      std::vector<float>& v = store->values[req.keys[i]];
      if (v.size() != len) v.assign(len, 0.0f);
      const float* g = req.vals.data() + off;
      float* w = v.data();
      for (size_t j = 0; j < len; ++j) w[j] += g[j];
      off += len;
    }
  } else {
    res.keys = req.keys;
    size_t total = 0;
    std::lock_guard<std::mutex> l(store->mu);
    res.lens.resize(n);
    for (size_t i = 0; i < n; ++i) {
      total += store->values[req.keys[i]].size();
      res.lens[i] = store->values[req.keys[i]].size();
    }
    res.vals.resize(total);
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
      const std::vector<float>& v = store->values[req.keys[i]];
      std::memcpy(res.vals.data() + off, v.data(), v.size() * sizeof(float));
      off += v.size();
    }
  }
  server->Response(meta, res);
}

double CpuSeconds(bool user) {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  const timeval& t = user ? u.ru_utime : u.ru_stime;
  return t.tv_sec + t.tv_usec / 1e6;
}

void RunWorker() {
  const long long bytes = atoll(getenv("BENCH_BYTES"));
  const double seconds = atof(getenv("BENCH_SECONDS"));
  const int servers = NumServers();
  int num_keys =
      getenv("BENCH_KEYS") ? atoi(getenv("BENCH_KEYS")) : 4 * servers;
  const long long elements = bytes / 4;
  KVWorker<float> kv(0, 0);
  std::vector<Key> keys(num_keys);
  std::vector<int> lens(num_keys);
  for (int i = 0; i < num_keys; ++i) {
    keys[i] = kMaxKey / num_keys * i;
    lens[i] = elements / num_keys + (i < elements % num_keys ? 1 : 0);
  }
  SArray<Key> skeys(keys);
  SArray<int> slens(lens);
  SArray<float> grads(elements, 1e-3f);
  SArray<float> weights(elements);
  SArray<int> pulled_lens;
  auto step = [&] {
    kv.Wait(kv.ZPush(skeys, grads, slens));
    kv.Wait(kv.ZPull(skeys, &weights, &pulled_lens));
  };
  step();                                       // warm-up
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // measure together
  const double u0 = CpuSeconds(true), s0 = CpuSeconds(false);
  const auto start = std::chrono::steady_clock::now();
  long long steps = 0;
  double wall = 0;
  while (wall < seconds || steps < 3) {
    step();
    ++steps;
    wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  std::printf(
      "worker %d bytes %lld steps %lld seconds %.3f gbps %.3f steps_per_s "
      "%.1f cpu_user %.3f cpu_sys %.3f\n",
      MyRank(), bytes, steps, wall, 2.0 * bytes * steps / wall / 1e9,
      steps / wall, CpuSeconds(true) - u0, CpuSeconds(false) - s0);
  std::fflush(stdout);
}

}  // namespace

int main() {
  Start(0);
  Store* store = nullptr;
  KVServer<float>* server = nullptr;
  if (IsServer()) {
    store = new Store;
    server = new KVServer<float>(0);
    server->set_request_handle(
        [store](const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
          Handle(store, m, d, s);
        });
  }
  // Workers start once every server has its handler.
  if (!IsScheduler())
    Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);
  if (IsWorker()) RunWorker();
  Finalize(0, true);
  delete server;
  delete store;
  std::printf("process %s cpu %.3f\n",
              IsScheduler() ? "scheduler"
              : IsServer()  ? "server"
                            : "worker",
              CpuSeconds(true) + CpuSeconds(false));
  return 0;
}
