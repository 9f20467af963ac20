// Dense push/pull driver over ps-lite's KVWorker, giving ps-lite its best
// (tools/peer/README.md says what each choice is worth). Each worker spreads
// BENCH_KEYS keys evenly over the key space (so over the servers), each with
// an equal share of the model's floats. A step is, with BENCH_FUSED=1 (the
// default), one ZPushPull and its Wait: the gradients go out and the updated
// weights come back in the same round trip, as `ps_bench --fused` (its
// default) ends a step; with BENCH_FUSED=0, ZPush, Wait, ZPull, Wait, as
// `ps_bench --fused=false`. The server adds pushed values into its store and
// answers a pull with a copy of them.
//
// Environment (besides ps-lite's DMLC_*): BENCH_BYTES (model bytes),
// BENCH_SECONDS (measuring time), and the variants: BENCH_KEYS (keys in all,
// default 1 per server), BENCH_FUSED (1), BENCH_LENS (0: every key's values
// the same length, no lens array; 1: a lens array sent with every push and
// pull, as the first driver did), BENCH_LOCK (0: the server's handle without
// a lock, as ps-lite calls it from one thread; 1: under a mutex). Each worker
// prints: worker RANK bytes B steps N seconds S gbps G steps_per_s R cpu_user
// U cpu_sys Y; each process at its end: process ROLE cpu C.
//
// Not part of this repository's build: build_ps_lite.sh compiles it against a
// ps-lite checkout, run_ps_lite.sh runs it (docs/performance/ps-bench.md).
// It is the peer's program, so it reads its settings from the environment as
// ps-lite does.
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

long long EnvInt(const char* name, long long fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoll(v) : fallback;
}

struct Store {
  bool lock = false;
  bool lens = false;  // answer pulls with a lens array (BENCH_LENS)
  std::mutex mu;
  std::unordered_map<Key, std::vector<float>> values;
};

// An answer array left uninitialized: it is filled right away.
SArray<float> Uninitialized(size_t n) {
  return SArray<float>(new float[n], n, /*deletable=*/true);
}

void Handle(Store* store, const KVMeta& meta, const KVPairs<float>& req,
            KVServer<float>* server) {
  std::unique_lock<std::mutex> l(store->mu, std::defer_lock);
  if (store->lock) l.lock();
  const size_t n = req.keys.size();
  const bool lens = store->lens;
  KVPairs<float> res;
  if (meta.push) {
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t len = req.lens.empty() ? req.vals.size() / n : req.lens[i];
      std::vector<float>& v = store->values[req.keys[i]];
      if (v.size() != len) v.assign(len, 0.0f);
      const float* g = req.vals.data() + off;
      float* w = v.data();
      for (size_t j = 0; j < len; ++j) w[j] += g[j];
      off += len;
    }
  }
  if (meta.pull) {
    res.keys = req.keys;
    size_t total = 0;
    if (lens) res.lens = SArray<int>(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t len = store->values[req.keys[i]].size();
      total += len;
      if (lens) res.lens[i] = static_cast<int>(len);
    }
    res.vals = Uninitialized(total);
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
  const int num_keys = static_cast<int>(EnvInt("BENCH_KEYS", NumServers()));
  const bool fused = EnvInt("BENCH_FUSED", 1) != 0;
  const bool use_lens = EnvInt("BENCH_LENS", 0) != 0;
  const long long elements = bytes / 4;
  if (!use_lens && elements % num_keys != 0) {
    std::fprintf(stderr,
                 "BENCH_LENS=0 needs %lld floats to split evenly "
                 "over %d keys\n",
                 elements, num_keys);
    std::exit(2);
  }
  KVWorker<float> kv(0, 0);
  std::vector<Key> keys(num_keys);
  std::vector<int> lens(num_keys);
  for (int i = 0; i < num_keys; ++i) {
    keys[i] = kMaxKey / num_keys * i;
    lens[i] = elements / num_keys + (i < elements % num_keys ? 1 : 0);
  }
  SArray<Key> skeys(keys);
  SArray<int> slens;
  if (use_lens) slens = SArray<int>(lens);
  SArray<float> grads(elements, 1e-3f);
  SArray<float> weights(elements);
  // ZPushPull sends the lens it is given with the push, and fills them in
  // from the answer.
  SArray<int> pulled_lens;
  if (use_lens) pulled_lens.CopyFrom(slens);
  SArray<int>* out_lens = use_lens ? &pulled_lens : nullptr;
  auto step = [&] {
    if (fused) {
      kv.Wait(kv.ZPushPull(skeys, grads, &weights, out_lens));
    } else {
      kv.Wait(kv.ZPush(skeys, grads, slens));
      kv.Wait(kv.ZPull(skeys, &weights, out_lens));
    }
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
    store->lock = EnvInt("BENCH_LOCK", 0) != 0;
    store->lens = EnvInt("BENCH_LENS", 0) != 0;
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
