// MovieLens ratings: per line
//   user item rating timestamp
// separated by a tab (ml-100k's u.data, u1.base, u1.test, ...) or by "::"
// (ml-1m's and ml-10m's ratings.dat). With RatingsSeparator::kAuto a line
// containing "::" is split there, any other at tabs.
//
// What a line becomes (batch.h): sparse fields "user" and "item", one id
// each, the ids as written (non-negative integers; one table per field, so
// no salt); label = the rating (LabelKind::kFloat). The timestamp must be an
// integer and is not used.
// Bad lines: a field count other than 4, an id or timestamp that does not
// parse, a rating that does not parse or is outside [min_rating,
// max_rating].
#ifndef PS_WORKER_DATA_MOVIELENS_FORMAT_H_
#define PS_WORKER_DATA_MOVIELENS_FORMAT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/data/batch.h"
#include "worker/data/line_parser.h"

namespace ps::worker::data {

enum class RatingsSeparator { kAuto, kTab, kDoubleColon };

struct MovieLensOptions {
  RatingsSeparator separator = RatingsSeparator::kAuto;
  // MovieLens 100k and 1M rate 1..5 in whole stars, later sets 0.5..5 in
  // half stars.
  double min_rating = 0.5;
  double max_rating = 5.0;
};

// Field 0 is "user", field 1 "item".
BatchSchema MovieLensSchema();
// INVALID_ARGUMENT if min_rating > max_rating or either is not finite.
absl::StatusOr<std::unique_ptr<LineParser>> NewMovieLensParser(
    const MovieLensOptions& options);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_MOVIELENS_FORMAT_H_
