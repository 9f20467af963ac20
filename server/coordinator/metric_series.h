// A job's metric series in the coordinator's memory, within a bound: the
// points workers report, grouped by series (name, member id, incarnation),
// each series holding at most `max_points_per_series` points. A series that
// passes the cap keeps its first point and its newest quarter as reported
// and merges older neighbours in pairs (the pairs that stand for the fewest
// reported points first, so the older part stays evenly spaced): a merged
// point carries the mean value, step, epoch and time of what it stands for,
// their minimum and maximum values, and how many points it merged
// (MetricPoint.merged). So a week-long job's series take the same memory as
// an hour-long one's, and the means of a series (throughput, staleness)
// stay exact when weighted by `merged`.
//
// Plain data with no lock of its own: it lives in a Job and is read and
// changed under the JobTable's lock. The same sequence of points gives the
// same series, so replaying the job store after a restart rebuilds what the
// live path had (for the same cap).
#ifndef PS_SERVER_COORDINATOR_METRIC_SERIES_H_
#define PS_SERVER_COORDINATOR_METRIC_SERIES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "proto/coordinator_service.pb.h"

namespace ps::coordinator {

class MetricSeriesSet {
 public:
  // The coordinator's default (--max_points_per_series): about 5.2 MB for
  // a job of 2 workers reporting 10 metrics each (20 series of 64-byte
  // points), once every series is full.
  static constexpr int kDefaultMaxPointsPerSeries = 4096;
  // Smaller caps are raised to this (a first point, a merged part and a
  // newest part need room).
  static constexpr int kMinPointsPerSeries = 8;

  explicit MetricSeriesSet(
      int max_points_per_series = kDefaultMaxPointsPerSeries);

  // Appends one point to its series (merging older ones past the cap).
  void Add(const MetricPoint& p);

  // Every point kept that `keep` accepts (all when it is empty), in the
  // order they were added (a merged point where the first it stands for
  // was). Not by time_ms: a worker's times start again at 0 when it
  // restarts (a rollback, a rejoin), and readers take "the first report
  // of each worker" and "the reports after the rollback" from the order.
  std::vector<MetricPoint> Points(
      const std::function<bool(const MetricPoint&)>& keep = {}) const;

  int64_t reported() const { return reported_; }
  // Points held now, over all series.
  int64_t size() const { return kept_; }
  bool empty() const { return kept_ == 0; }
  int64_t num_series() const { return static_cast<int64_t>(series_.size()); }
  int max_points_per_series() const { return max_points_; }
  // The heap memory the series hold (their points' vectors and names).
  int64_t bytes() const;

 private:
  // A kept point without the series' name, member and incarnation.
  struct Point {
    int64_t seq = 0;  // its place among the points added (the first's)
    int64_t step = 0;
    int64_t time_ms = 0;
    int32_t merged = 1;
    bool final_model = false;  // MetricPoint.final_model
    double value = 0;
    double epoch = 0;
    double min_value = 0;
    double max_value = 0;
  };
  using Key = std::tuple<std::string, int64_t, int64_t>;

  static Point Merge(const Point& a, const Point& b);
  // Merges older points of `points` until it holds at most 3/4 of the cap.
  void Thin(std::vector<Point>& points);

  int max_points_;
  std::map<Key, std::vector<Point>> series_;
  int64_t reported_ = 0;
  int64_t kept_ = 0;
};

}  // namespace ps::coordinator

#endif  // PS_SERVER_COORDINATOR_METRIC_SERIES_H_
