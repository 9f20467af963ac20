#include "worker/data/movielens_format.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/data/text_fields.h"

namespace ps::worker::data {
namespace {

constexpr int kFields = 4;

// Splits at every "::"; returns the number of fields, or max_fields + 1 if
// there are more.
int SplitDoubleColon(absl::string_view line, absl::string_view* out,
                     int max_fields) {
  int n = 0;
  size_t start = 0;
  for (;;) {
    const size_t next = line.find("::", start);
    if (n == max_fields) return max_fields + 1;
    if (next == absl::string_view::npos) {
      out[n++] = line.substr(start);
      return n;
    }
    out[n++] = line.substr(start, next - start);
    start = next + 2;
  }
}

class MovieLensParser : public LineParser {
 public:
  explicit MovieLensParser(const MovieLensOptions& options)
      : options_(options), schema_(MovieLensSchema()) {}

  const char* name() const override { return "movielens"; }
  const BatchSchema& schema() const override { return schema_; }

  absl::Status Parse(absl::string_view line, BatchBuilder* builder) override {
    bool colons = options_.separator == RatingsSeparator::kDoubleColon;
    if (options_.separator == RatingsSeparator::kAuto) {
      colons = line.find("::") != absl::string_view::npos;
    }
    std::array<absl::string_view, kFields> fields;
    const int n = colons ? SplitDoubleColon(line, fields.data(), kFields)
                         : SplitFields(line, '\t', fields.data(), kFields);
    if (n != kFields) {
      return absl::InvalidArgumentError(absl::StrCat(
          n > kFields ? "more than 4" : absl::StrCat(n), " ",
          colons ? "'::'" : "tab", "-separated fields, expected 4 (user, ",
          "item, rating, timestamp)"));
    }
    uint64_t user = 0;
    uint64_t item = 0;
    double rating = 0.0;
    int64_t timestamp = 0;
    if (!ParseUint64(fields[0], &user)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "user id ", QuoteToken(fields[0]), " is not an integer >= 0"));
    }
    if (!ParseUint64(fields[1], &item)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item id ", QuoteToken(fields[1]), " is not an integer >= 0"));
    }
    if (!ParseFiniteDouble(fields[2], &rating)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rating ", QuoteToken(fields[2]), " is not a number"));
    }
    if (rating < options_.min_rating || rating > options_.max_rating) {
      return absl::InvalidArgumentError(
          absl::StrCat("rating ", QuoteToken(fields[2]), " is outside [",
                       options_.min_rating, ", ", options_.max_rating, "]"));
    }
    if (!ParseInt64(fields[3], &timestamp)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "timestamp ", QuoteToken(fields[3]), " is not an integer"));
    }
    builder->BeginExample();
    builder->AddId(0, user);
    builder->AddId(1, item);
    builder->SetLabel(static_cast<float>(rating));
    return builder->EndExample();
  }

 private:
  const MovieLensOptions options_;
  const BatchSchema schema_;
};

}  // namespace

BatchSchema MovieLensSchema() {
  BatchSchema schema;
  schema.sparse.push_back({"user", /*weighted=*/false});
  schema.sparse.push_back({"item", /*weighted=*/false});
  schema.label_kind = LabelKind::kFloat;
  return schema;
}

absl::StatusOr<std::unique_ptr<LineParser>> NewMovieLensParser(
    const MovieLensOptions& options) {
  if (!std::isfinite(options.min_rating) ||
      !std::isfinite(options.max_rating) ||
      options.min_rating > options.max_rating) {
    return absl::InvalidArgumentError(absl::StrCat("bad rating range [",
                                                   options.min_rating, ", ",
                                                   options.max_rating, "]"));
  }
  return std::unique_ptr<LineParser>(
      std::make_unique<MovieLensParser>(options));
}

}  // namespace ps::worker::data
