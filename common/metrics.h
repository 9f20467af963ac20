// The metrics registry every daemon uses: Prometheus counters, gauges and
// histograms, exported in Prometheus text format on an HTTP /metrics port
// and readable in-process (for RPCs and tests).
#ifndef PS_COMMON_METRICS_H_
#define PS_COMMON_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Owns a prometheus::Registry and, once Serve() succeeded, the HTTP exposer.
// Metric objects returned by the Add* calls live as long as the registry.
// Thread-safe: prometheus-cpp's families and metrics are.
class MetricsRegistry {
 public:
  using Labels = std::map<std::string, std::string>;

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

  // Starts serving GET /metrics on `address` ("127.0.0.1:0" picks a free
  // port). Returns the bound port. UNAVAILABLE if the address cannot be bound.
  absl::StatusOr<int> Serve(const std::string& address);

  // The whole registry in Prometheus text exposition format.
  std::string TextSnapshot() const;

  // Exponential latency buckets in seconds, 50 us .. ~6.5 s.
  static std::vector<double> LatencyBuckets();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  struct ExposerHolder;
  std::unique_ptr<ExposerHolder> exposer_;
};

}  // namespace ps

#endif  // PS_COMMON_METRICS_H_
