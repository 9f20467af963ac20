// The metrics registry every daemon uses: Prometheus counters, gauges and
// histograms, exported in Prometheus text format on an HTTP /metrics port
// and readable in-process (for RPCs and tests). Figures too costly to keep
// current on a hot path are filled by collect hooks, run at each scrape.
#ifndef PS_COMMON_PLATFORM_METRICS_H_
#define PS_COMMON_PLATFORM_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Owns a prometheus::Registry and, once Serve() succeeded, the HTTP exposer.
// Metric objects returned by the Add* calls live as long as the registry.
// Thread-safe: prometheus-cpp's families and metrics are, and the collect
// hooks are run and changed under a lock of their own.
class MetricsRegistry {
 public:
  using Labels = std::map<std::string, std::string>;

  // A collect hook's registration: the hook runs at every collection until
  // this is destroyed. Destroying it waits for a run in progress, so what
  // the hook reads may be destroyed right after it. It may outlive the
  // registry (it then unregisters nothing).
  class CollectHook {
   public:
    ~CollectHook();
    CollectHook(const CollectHook&) = delete;
    CollectHook& operator=(const CollectHook&) = delete;

   private:
    friend class MetricsRegistry;
    struct Hooks;
    CollectHook(std::shared_ptr<Hooks> hooks, uint64_t id)
        : hooks_(std::move(hooks)), id_(id) {}
    const std::shared_ptr<Hooks> hooks_;
    const uint64_t id_;
  };

  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Names get the "ps_" prefix. Adding the same name and labels twice
  // returns the same metric.
  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const Labels& labels = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const Labels& labels = {});
  prometheus::Histogram& Histogram(const std::string& name,
                                   const std::string& help,
                                   const std::vector<double>& buckets,
                                   const Labels& labels = {});

  // Runs `hook` before each collection (a scrape of /metrics, TextSnapshot),
  // to set gauges from figures that cost too much to publish on every
  // update. Hooks run one collection at a time, in the order they were
  // added (so a newer hook setting the same gauge as an older one wins);
  // a hook must not add hooks or destroy a CollectHook.
  [[nodiscard]] std::unique_ptr<CollectHook> AddCollectHook(
      std::function<void()> hook);

  // Starts serving GET /metrics on `address` ("127.0.0.1:0" picks a free
  // port). Returns the bound port. UNAVAILABLE if the address cannot be bound.
  absl::StatusOr<int> Serve(const std::string& address);

  // The whole registry in Prometheus text exposition format.
  std::string TextSnapshot() const;

  // Exponential latency buckets in seconds, 50 us .. ~6.5 s.
  static std::vector<double> LatencyBuckets();

 private:
  class HookedCollectable;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<CollectHook::Hooks> hooks_;
  // What the exposer collects: the hooks, then the registry.
  std::shared_ptr<HookedCollectable> collectable_;
  struct ExposerHolder;
  std::unique_ptr<ExposerHolder> exposer_;
};

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_METRICS_H_
