#include "server/coordinator/metric_series.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace ps::coordinator {

MetricSeriesSet::MetricSeriesSet(int max_points_per_series)
    : max_points_(std::max(max_points_per_series, kMinPointsPerSeries)) {}

void MetricSeriesSet::Add(const MetricPoint& p) {
  std::vector<Point>& points =
      series_[Key(p.name(), p.member_id(), p.incarnation())];
  Point q;
  q.seq = reported_;
  q.step = p.step();
  q.time_ms = p.time_ms();
  q.value = p.value();
  q.epoch = p.epoch();
  // A point merged elsewhere (none is reported so today) keeps its weight.
  q.merged = static_cast<int32_t>(std::max<int64_t>(1, p.merged()));
  q.final_model = p.final_model();
  q.min_value = q.merged > 1 ? p.min_value() : p.value();
  q.max_value = q.merged > 1 ? p.max_value() : p.value();
  points.push_back(q);
  ++reported_;
  ++kept_;
  if (static_cast<int64_t>(points.size()) > max_points_) {
    const int64_t before = static_cast<int64_t>(points.size());
    Thin(points);
    kept_ -= before - static_cast<int64_t>(points.size());
  }
}

MetricSeriesSet::Point MetricSeriesSet::Merge(const Point& a, const Point& b) {
  const double wa = static_cast<double>(a.merged);
  const double wb = static_cast<double>(b.merged);
  const double w = wa + wb;
  auto mean = [&](double x, double y) { return (x * wa + y * wb) / w; };
  Point m;
  m.seq = std::min(a.seq, b.seq);
  m.merged = a.merged + b.merged;
  m.final_model = b.final_model;  // the newer point's
  m.value = mean(a.value, b.value);
  m.epoch = mean(a.epoch, b.epoch);
  m.step = std::llround(
      mean(static_cast<double>(a.step), static_cast<double>(b.step)));
  m.time_ms = std::llround(
      mean(static_cast<double>(a.time_ms), static_cast<double>(b.time_ms)));
  // fmin/fmax skip a NaN: a diverged loss shows in the mean, not the range.
  m.min_value = std::fmin(a.min_value, b.min_value);
  m.max_value = std::fmax(a.max_value, b.max_value);
  return m;
}

void MetricSeriesSet::Thin(std::vector<Point>& points) {
  const size_t target = static_cast<size_t>(max_points_) * 3 / 4;
  const size_t newest = static_cast<size_t>(max_points_) / 4;
  while (points.size() > target) {
    // The older part: after the first point, before the newest quarter.
    // Merge pairs of neighbours of equal weight, the lightest first, so
    // weights go 1, 2, 4, ... and stay even along the older part; only
    // when no two neighbours weigh the same (a short series under a small
    // cap) the lightest pair, whatever its weights.
    const size_t end = points.size() - newest;
    int64_t lightest = std::numeric_limits<int64_t>::max();
    bool equal = false;
    for (size_t i = 1; i + 1 < end; ++i) {
      if (points[i].merged == points[i + 1].merged &&
          (!equal || points[i].merged < lightest)) {
        lightest = points[i].merged;
        equal = true;
      }
    }
    if (!equal) {
      for (size_t i = 1; i + 1 < end; ++i) {
        lightest = std::min<int64_t>(lightest,
                                     points[i].merged + points[i + 1].merged);
      }
      if (lightest == std::numeric_limits<int64_t>::max()) return;  // no pair
    }
    auto merges = [&](const Point& a, const Point& b) {
      return equal ? a.merged == lightest && b.merged == lightest
                   : a.merged + b.merged == lightest;
    };
    // One pass, oldest first.
    size_t out = 1;
    size_t i = 1;
    size_t size = points.size();
    while (i < end) {
      if (i + 1 < end && size > target && merges(points[i], points[i + 1])) {
        points[out++] = Merge(points[i], points[i + 1]);
        i += 2;
        --size;
      } else {
        points[out++] = points[i++];
      }
    }
    for (; i < points.size(); ++i) points[out++] = points[i];
    points.resize(out);
  }
}

int64_t MetricSeriesSet::bytes() const {
  int64_t total = 0;
  for (const auto& [key, points] : series_) {
    total += static_cast<int64_t>(points.capacity() * sizeof(Point) +
                                  std::get<0>(key).capacity());
  }
  return total;
}

std::vector<MetricPoint> MetricSeriesSet::Points(
    const std::function<bool(const MetricPoint&)>& keep) const {
  std::vector<MetricPoint> out;
  out.reserve(static_cast<size_t>(kept_));
  std::vector<std::pair<int64_t, size_t>> order;  // (seq, index into out)
  order.reserve(static_cast<size_t>(kept_));
  for (const auto& [key, points] : series_) {
    const auto& [name, member_id, incarnation] = key;
    for (const Point& q : points) {
      MetricPoint p;
      p.set_name(name);
      p.set_member_id(member_id);
      p.set_incarnation(incarnation);
      p.set_step(q.step);
      p.set_time_ms(q.time_ms);
      p.set_value(q.value);
      p.set_epoch(q.epoch);
      p.set_final_model(q.final_model);
      if (q.merged > 1) {
        p.set_merged(q.merged);
        p.set_min_value(q.min_value);
        p.set_max_value(q.max_value);
      }
      if (keep && !keep(p)) continue;
      order.emplace_back(q.seq, out.size());
      out.push_back(std::move(p));
    }
  }
  std::sort(order.begin(), order.end());
  std::vector<MetricPoint> sorted;
  sorted.reserve(out.size());
  for (const auto& [seq, index] : order)
    sorted.push_back(std::move(out[index]));
  return sorted;
}

}  // namespace ps::coordinator
