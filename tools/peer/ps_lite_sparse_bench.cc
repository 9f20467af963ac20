// Sparse push/pull driver over ps-lite's KVWorker::ZPush / ZPull, on the key
// stream of `ps_bench --mode=sparse` (tools/ps_bench_sparse.h), giving
// ps-lite its best (tools/peer/README.md says what each choice is worth):
// worker r draws batches of BENCH_BATCH distinct keys Zipf(BENCH_ZIPF_S)
// from [1, BENCH_KEY_SPACE] with the same sampler (tools/data/zipf.h) and
// seed as ps_bench's worker r + 1. ps-lite slices a push by key range, so
// each key is sent as its 64-bit hash (Mix64, a bijection) and a batch is
// sorted first, as a ps-lite user must. By default the first BENCH_PREDRAW
// (4096) batches are drawn before the timed loop, so the loop does nothing
// but ps-lite's calls (past them it draws in the loop; BENCH_PREDRAW=0
// draws the batch after next while the push is in flight, as the first
// driver did). A step pushes a gradient for every row of the batch, waits,
// pulls the next batch's rows and waits (ps_bench's --fused=false). The
// server keeps rows in a hash map (key -> offset in one growing array; an
// absl::flat_hash_map, or std::unordered_map with BENCH_MAP=std), adds each
// pushed row into its row (a new key starts at zeros) and answers a pull
// with copies of the rows; its handle takes no lock (ps-lite calls it from
// one thread; BENCH_LOCK=1 takes a mutex). BENCH_RESERVE=ROWS sizes the
// rows' array and the map for ROWS rows up front (default 0: they grow).
//
// Environment (besides ps-lite's DMLC_*): BENCH_DIM (floats per row),
// BENCH_BATCH (unique keys per step, default 4096), BENCH_KEY_SPACE
// (default 10^7), BENCH_ZIPF_S (default 1.05), BENCH_SECONDS (measuring
// time), and the variants above. Each worker prints: worker RANK dim D
// steps N seconds S rows_per_s R gbps G (rows counted once per step,
// push+pull; bytes: keys and rows, both ways, as ps_bench counts them).
//
// Not part of this repository's build: build_ps_lite.sh compiles it against
// a ps-lite checkout, run_ps_lite_sparse.sh runs it (docs/performance/
// sparse-tables.md). It is the peer's program, so it reads its settings
// from the environment as ps-lite does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ps/ps.h"
#include "tools/data/zipf.h"
#include "worker/data/random.h"

using namespace ps;

namespace {

long long EnvInt(const char* name, long long fallback) {
  const char* v = getenv(name);
  return v != nullptr ? atoll(v) : fallback;
}

struct Store {
  bool lock = false;
  bool std_map = false;
  std::mutex mu;
  std::unordered_map<Key, size_t> std_index;  // key -> offset in rows
  absl::flat_hash_map<Key, size_t> index;
  std::vector<float> rows;
  size_t dim = 0;
  size_t reserve = 0;  // rows reserved once dim is known (BENCH_RESERVE)

  float* Row(Key key) {
    return std_map ? RowIn(std_index, key) : RowIn(index, key);
  }
  template <typename Map>
  float* RowIn(Map& map, Key key) {
    auto [it, added] = map.emplace(key, rows.size());
    if (added) rows.resize(rows.size() + dim, 0.0f);
    return rows.data() + it->second;
  }
};

void Handle(Store* store, const KVMeta& meta, const KVPairs<float>& req,
            KVServer<float>* server) {
  KVPairs<float> res;
  const size_t n = req.keys.size();
  std::unique_lock<std::mutex> l(store->mu, std::defer_lock);
  if (store->lock) l.lock();
  if (meta.push) {
    if (store->dim == 0) {
      store->dim = req.vals.size() / n;
      store->rows.reserve(store->reserve * store->dim);
      if (store->std_map) {
        store->std_index.reserve(store->reserve);
      } else {
        store->index.reserve(store->reserve);
      }
    }
    const size_t dim = store->dim;
    for (size_t i = 0; i < n; ++i) {
      float* w = store->Row(req.keys[i]);
      const float* g = req.vals.data() + i * dim;
      for (size_t j = 0; j < dim; ++j) w[j] += g[j];
    }
  } else {
    const size_t dim = store->dim;
    res.keys = req.keys;
    // Left uninitialized: every row is copied in right away.
    res.vals = SArray<float>(new float[n * dim], n* dim, /*deletable=*/true);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(res.vals.data() + i * dim, store->Row(req.keys[i]),
                  dim * sizeof(float));
    }
  }
  server->Response(meta, res);
}

// ps_bench's ZipfKeyBatches::Next, then hashed and sorted for ps-lite.
class Batches {
 public:
  Batches(long long key_space, double s, int batch, uint64_t seed)
      : zipf_(*ps::data_tools::ZipfSampler::Create(key_space, s)),
        batch_(batch),
        rng_(seed) {}
  // A fresh array each time: ps-lite sends from it without a copy.
  SArray<Key> Next() {
    SArray<Key> keys(batch_);
    seen_.clear();
    int n = 0;
    while (n < batch_) {
      const uint64_t k = static_cast<uint64_t>(zipf_.Sample(rng_));
      if (seen_.insert(k).second) keys[n++] = ps::worker::data::Mix64(k);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

 private:
  ps::data_tools::ZipfSampler zipf_;
  int batch_;
  ps::worker::data::SplitMix64 rng_;
  std::unordered_set<uint64_t> seen_;
};

void RunWorker() {
  const int dim = EnvInt("BENCH_DIM", 16);
  const int batch = EnvInt("BENCH_BATCH", 4096);
  const double seconds = atof(getenv("BENCH_SECONDS"));
  const char* s_text = getenv("BENCH_ZIPF_S");
  Batches batches(EnvInt("BENCH_KEY_SPACE", 10000000),
                  s_text != nullptr ? atof(s_text) : 1.05, batch,
                  0x5eed0000 + static_cast<uint64_t>(MyRank()) + 1);
  // Batches drawn before the timed loop, in stream order.
  std::vector<SArray<Key>> drawn(EnvInt("BENCH_PREDRAW", 4096));
  for (SArray<Key>& b : drawn) b = batches.Next();
  size_t taken = 0;
  auto draw = [&] {
    return taken < drawn.size() ? std::move(drawn[taken++]) : batches.Next();
  };
  KVWorker<float> kv(0, 0);
  SArray<Key> now = draw();
  SArray<Key> next = draw();
  SArray<float> grads(static_cast<size_t>(batch) * dim, 1e-3f);
  // Past the drawn batches, the batch after next is drawn while the push is
  // in flight, as ps_bench draws it while its step's call is.
  auto step = [&] {
    const int pushed = kv.ZPush(now, grads);
    SArray<Key> after = draw();
    kv.Wait(pushed);
    SArray<float> rows;
    kv.Wait(kv.ZPull(next, &rows));
    now = next;
    next = after;
  };
  step();                                       // warm-up
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // measure together
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
  const double bytes_per_step = 2.0 * batch * (8 + 4.0 * dim);
  std::printf(
      "worker %d dim %d steps %lld seconds %.3f rows_per_s %.0f "
      "gbps %.3f\n",
      MyRank(), dim, steps, wall, batch * steps / wall,
      bytes_per_step * steps / wall / 1e9);
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
    const char* map = getenv("BENCH_MAP");
    store->std_map = map != nullptr && std::string(map) == "std";
    store->reserve = static_cast<size_t>(EnvInt("BENCH_RESERVE", 0));
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
  return 0;
}
