#include "worker/data/criteo_format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/data/random.h"
#include "worker/data/text_fields.h"

namespace ps::worker::data {
namespace {

constexpr int kFieldsWithLabel =
    1 + kCriteoIntegerFeatures + kCriteoCategoricalFeatures;
// Integers below this (almost all of them in the real data) take log1p from a
// table.
constexpr int kLogTableSize = 4096;
// Marks the missing key's hash apart from the ids' ("missing" in ASCII).
constexpr uint64_t kMissingMarker = 0x6d697373696e67ULL;

uint64_t FieldSalt(int field, uint64_t hash_seed) {
  return HashWords(hash_seed, static_cast<uint64_t>(field) + 1);
}

class CriteoParser : public LineParser {
 public:
  explicit CriteoParser(const CriteoOptions& options)
      : options_(options), schema_(CriteoSchema(options)) {
    for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
      salt_[f] = FieldSalt(f, options.hash_seed);
      missing_[f] = CriteoMissingKey(f, options.hash_seed);
    }
    for (int x = 0; x < kLogTableSize; ++x) {
      log_table_[x] = static_cast<float>(std::log1p(static_cast<double>(x)));
    }
  }

  const char* name() const override { return "criteo"; }
  const BatchSchema& schema() const override { return schema_; }

  absl::Status Parse(absl::string_view line, BatchBuilder* builder) override {
    const int expected = kFieldsWithLabel - (options_.has_label ? 0 : 1);
    std::array<absl::string_view, kFieldsWithLabel> fields;
    const int n = SplitFields(line, '\t', fields.data(), expected);
    if (n != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(n > expected ? "more than " : "", std::min(n, expected),
                       " tab-separated fields, expected ", expected, " (",
                       options_.has_label ? "label, " : "",
                       "13 integer and 26 categorical features)"));
    }
    int next = 0;
    float label = 0.0f;
    if (options_.has_label) {
      const absl::string_view token = fields[next++];
      if (token == "1") {
        label = 1.0f;
      } else if (token != "0") {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", QuoteToken(token), " is not 0 or 1"));
      }
    }
    std::array<float, kCriteoIntegerFeatures> dense;
    for (int i = 0; i < kCriteoIntegerFeatures; ++i) {
      const absl::string_view token = fields[next++];
      int64_t x = 0;
      if (!token.empty() && !ParseInt64(token, &x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("integer feature I", i + 1, " ", QuoteToken(token),
                         " is not an integer"));
      }
      dense[i] = x < kLogTableSize ? log_table_[std::max<int64_t>(x, 0)]
                                   : CriteoDenseValue(x);
    }
    std::array<uint64_t, kCriteoCategoricalFeatures> keys;
    std::array<bool, kCriteoCategoricalFeatures> present;
    for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
      const absl::string_view token = fields[next++];
      present[f] = !token.empty();
      uint64_t id = 0;
      if (present[f] && !ParseHex64(token, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("categorical feature C", f + 1, " ", QuoteToken(token),
                         " is not a hex id (1 to 16 hex digits)"));
      }
      keys[f] = present[f] ? Mix64(id ^ salt_[f]) : missing_[f];
    }

    builder->BeginExample();
    std::copy(dense.begin(), dense.end(), builder->dense().begin());
    const bool empty_bags =
        options_.missing_categorical == MissingCategorical::kEmptyBag;
    for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
      if (present[f] || !empty_bags) builder->AddId(f, keys[f]);
    }
    builder->SetLabel(label);
    return builder->EndExample();
  }

 private:
  const CriteoOptions options_;
  const BatchSchema schema_;
  std::array<uint64_t, kCriteoCategoricalFeatures> salt_;
  std::array<uint64_t, kCriteoCategoricalFeatures> missing_;
  std::array<float, kLogTableSize> log_table_;
};

}  // namespace

uint64_t CriteoKey(int field, uint64_t value, uint64_t hash_seed) {
  return Mix64(value ^ FieldSalt(field, hash_seed));
}

uint64_t CriteoMissingKey(int field, uint64_t hash_seed) {
  return HashWords(FieldSalt(field, hash_seed), kMissingMarker);
}

float CriteoDenseValue(int64_t x) {
  return static_cast<float>(
      std::log1p(static_cast<double>(std::max<int64_t>(x, 0))));
}

BatchSchema CriteoSchema(const CriteoOptions& options) {
  BatchSchema schema;
  schema.dense_dim = kCriteoIntegerFeatures;
  for (int f = 0; f < kCriteoCategoricalFeatures; ++f) {
    schema.sparse.push_back({absl::StrCat("C", f + 1), /*weighted=*/false});
  }
  schema.label_kind = options.has_label ? LabelKind::kFloat : LabelKind::kNone;
  return schema;
}

std::unique_ptr<LineParser> NewCriteoParser(const CriteoOptions& options) {
  return std::make_unique<CriteoParser>(options);
}

}  // namespace ps::worker::data
