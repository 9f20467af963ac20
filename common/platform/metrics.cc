#include "common/platform/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

struct MetricsRegistry::CollectHook::Hooks {
  absl::Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 0;
  // By id: the order they were added.
  std::map<uint64_t, std::function<void()>> hooks ABSL_GUARDED_BY(mu);

  void RunAll() {
    absl::MutexLock l(&mu);
    for (auto& [id, hook] : hooks) hook();
  }
};

MetricsRegistry::CollectHook::~CollectHook() {
  absl::MutexLock l(&hooks_->mu);
  hooks_->hooks.erase(id_);
}

class MetricsRegistry::HookedCollectable final
    : public prometheus::Collectable {
 public:
  HookedCollectable(std::shared_ptr<prometheus::Registry> registry,
                    std::shared_ptr<CollectHook::Hooks> hooks)
      : registry_(std::move(registry)), hooks_(std::move(hooks)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    hooks_->RunAll();
    return registry_->Collect();
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::shared_ptr<CollectHook::Hooks> hooks_;
};

struct MetricsRegistry::ExposerHolder {
  explicit ExposerHolder(const std::string& address) : exposer(address) {}
  prometheus::Exposer exposer;
};

MetricsRegistry::MetricsRegistry()
    : registry_(std::make_shared<prometheus::Registry>()),
      hooks_(std::make_shared<CollectHook::Hooks>()),
      collectable_(std::make_shared<HookedCollectable>(registry_, hooks_)) {}

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

std::unique_ptr<MetricsRegistry::CollectHook> MetricsRegistry::AddCollectHook(
    std::function<void()> hook) {
  absl::MutexLock l(&hooks_->mu);
  const uint64_t id = hooks_->next_id++;
  hooks_->hooks.emplace(id, std::move(hook));
  return std::unique_ptr<CollectHook>(new CollectHook(hooks_, id));
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
  exposer_->exposer.RegisterCollectable(collectable_);
  const std::vector<int> ports = exposer_->exposer.GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": no port bound"));
  }
  return ports.front();
}

std::string MetricsRegistry::TextSnapshot() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, collectable_->Collect());
  return out.str();
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  std::vector<double> b;
  for (double s = 50e-6; s < 7.0; s *= 2) b.push_back(s);
  return b;
}

}  // namespace ps
