#include "worker/loop/metric_window.h"

namespace ps::worker {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

MetricStamp::MetricStamp(const Clock* clock, int64_t steps_per_epoch)
    : clock_(clock),
      steps_per_epoch_(steps_per_epoch),
      job_start_(clock->Now()) {}

MetricPoint MetricStamp::Point(const std::string& name, double value,
                               int64_t step) const {
  MetricPoint p;
  p.set_name(name);
  p.set_value(value);
  p.set_step(step);
  p.set_epoch(static_cast<double>(step) / steps_per_epoch_);
  const absl::Time now = clock_->Now();
  p.set_time_ms(absl::ToInt64Milliseconds(now - job_start_));
  p.set_unix_ms(absl::ToUnixMillis(now));
  return p;
}

MetricWindow::MetricWindow(const MetricStamp* stamp, const Clock* clock,
                           const MetricWindowOptions& options)
    : stamp_(stamp), clock_(clock), options_(options) {
  Reset();
}

void MetricWindow::Reset() {
  steps_ = 0;
  loss_ = wait_ = pull_ = compute_ = push_ = staleness_ = 0;
  staleness_ends_ = 0;
  start_ = clock_->Now();
}

void MetricWindow::AddStep(float loss, const StepSplit& split) {
  steps_++;
  loss_ += loss;
  wait_ += Ms(split.wait);
  pull_ += Ms(split.pull);
  compute_ += Ms(split.compute);
  push_ += Ms(split.push);
}

void MetricWindow::AddStaleness(double sum, int64_t ends) {
  staleness_ += sum;
  staleness_ends_ += ends;
}

void MetricWindow::Report(int64_t clock, const MetricSink& sink) {
  if (steps_ == 0) return;
  const double n = static_cast<double>(steps_);
  const double secs = absl::ToDoubleSeconds(clock_->Now() - start_);
  const MetricStamp& s = *stamp_;
  std::vector<MetricPoint> points = {
      s.Point("train_loss", loss_ / n, clock),
      s.Point("examples_per_sec", secs > 0 ? n * options_.batch_size / secs : 0,
              clock),
      s.Point("step_time_ms", secs * 1000 / n, clock),
      s.Point("wait_ms", wait_ / n, clock),
      s.Point("pull_ms", pull_ / n, clock),
      s.Point("compute_ms", compute_ / n, clock),
      s.Point("push_ms", push_ / n, clock),
      s.Point("staleness",
              staleness_ends_ > 0 ? staleness_ / staleness_ends_ : 0.0, clock),
      s.Point("clock", static_cast<double>(clock), clock)};
  if (options_.extra) {
    for (const auto& [name, value] : options_.extra()) {
      points.push_back(s.Point(name, value, clock));
    }
  }
  sink(std::move(points), false);
  Reset();
}

}  // namespace ps::worker
