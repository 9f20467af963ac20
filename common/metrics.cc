#include "common/metrics.h"

#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

struct MetricsRegistry::ExposerHolder {
  explicit ExposerHolder(const std::string& address) : exposer(address) {}
  prometheus::Exposer exposer;
};

MetricsRegistry::MetricsRegistry()
    : registry_(std::make_shared<prometheus::Registry>()) {}

MetricsRegistry::~MetricsRegistry() = default;

prometheus::Counter& MetricsRegistry::Counter(const std::string& name,
                                              const std::string& help,
                                              const Labels& labels) {
  return prometheus::BuildCounter()
      .Name("ps_" + name)
      .Help(help)
      .Register(*registry_)
      .Add(labels);
}

prometheus::Gauge& MetricsRegistry::Gauge(const std::string& name,
                                          const std::string& help,
                                          const Labels& labels) {
  return prometheus::BuildGauge()
      .Name("ps_" + name)
      .Help(help)
      .Register(*registry_)
      .Add(labels);
}

prometheus::Histogram& MetricsRegistry::Histogram(
    const std::string& name, const std::string& help,
    const std::vector<double>& buckets, const Labels& labels) {
  return prometheus::BuildHistogram()
      .Name("ps_" + name)
      .Help(help)
      .Register(*registry_)
      .Add(labels, prometheus::Histogram::BucketBoundaries(buckets));
}

absl::StatusOr<int> MetricsRegistry::Serve(const std::string& address) {
  if (exposer_ != nullptr) {
    return absl::FailedPreconditionError("metrics are already being served");
  }
  try {
    exposer_ = std::make_unique<ExposerHolder>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": ", e.what()));
  }
  exposer_->exposer.RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->exposer.GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": no port bound"));
  }
  return ports.front();
}

std::string MetricsRegistry::TextSnapshot() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  std::vector<double> b;
  for (double s = 50e-6; s < 7.0; s *= 2) b.push_back(s);
  return b;
}

}  // namespace ps
