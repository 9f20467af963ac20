#include "worker/data/libsvm_format.h"

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

constexpr int64_t kMaxDenseDim = int64_t{1} << 24;

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// The next space-separated token of *rest, or an empty view at the end.
absl::string_view NextToken(absl::string_view* rest) {
  size_t i = 0;
  while (i < rest->size() && IsSpace((*rest)[i])) ++i;
  size_t j = i;
  while (j < rest->size() && !IsSpace((*rest)[j])) ++j;
  const absl::string_view token = rest->substr(i, j - i);
  rest->remove_prefix(j);
  return token;
}

class LibsvmParser : public LineParser {
 public:
  LibsvmParser(const LibsvmOptions& options, BatchSchema schema)
      : options_(options), schema_(std::move(schema)) {}

  const char* name() const override { return "libsvm"; }
  const BatchSchema& schema() const override { return schema_; }

  absl::Status Parse(absl::string_view line, BatchBuilder* builder) override {
    const size_t comment = line.find('#');
    if (comment != absl::string_view::npos) line = line.substr(0, comment);
    absl::string_view rest = line;
    const absl::string_view label_token = NextToken(&rest);
    if (label_token.empty()) {
      return absl::InvalidArgumentError("empty line (no label)");
    }
    double label = 0.0;
    if (!ParseFiniteDouble(label_token, &label)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", QuoteToken(label_token), " is not a number"));
    }
    absl::Status label_ok = CheckLabel(label_token, &label);
    if (!label_ok.ok()) return label_ok;

    builder->BeginExample();
    const bool dense = options_.dense_dim > 0;
    for (;;) {
      const absl::string_view token = NextToken(&rest);
      if (token.empty()) break;
      const size_t colon = token.find(':');
      if (colon == absl::string_view::npos) {
        builder->AbortExample();
        return absl::InvalidArgumentError(
            absl::StrCat("token ", QuoteToken(token), " is not index:value"));
      }
      const absl::string_view index_text = token.substr(0, colon);
      if (index_text == "qid") continue;
      uint64_t index = 0;
      double value = 0.0;
      if (!ParseUint64(index_text, &index)) {
        builder->AbortExample();
        return absl::InvalidArgumentError(
            absl::StrCat("feature index ", QuoteToken(index_text),
                         " is not an integer >= 0"));
      }
      const absl::string_view value_text = token.substr(colon + 1);
      if (!ParseFiniteDouble(value_text, &value) ||
          !std::isfinite(static_cast<float>(value))) {
        builder->AbortExample();
        return absl::InvalidArgumentError(
            absl::StrCat("value ", QuoteToken(value_text), " of feature ",
                         index, " is not a finite float"));
      }
      if (!dense) {
        builder->AddWeightedId(0, index, static_cast<float>(value));
        continue;
      }
      const uint64_t base = static_cast<uint64_t>(options_.index_base);
      if (index < base ||
          index - base >= static_cast<uint64_t>(options_.dense_dim)) {
        builder->AbortExample();
        return absl::InvalidArgumentError(
            absl::StrCat("feature index ", index, " is outside [", base, ", ",
                         base + options_.dense_dim, ") (dense_dim ",
                         options_.dense_dim, ")"));
      }
      builder->dense()[index - base] = static_cast<float>(value);
    }
    if (options_.labels == LibsvmLabels::kClass) {
      builder->SetClass(static_cast<int32_t>(label));
    } else {
      builder->SetLabel(static_cast<float>(label));
    }
    return builder->EndExample();
  }

 private:
  // Checks *label against the label kind and maps it to what is stored.
  absl::Status CheckLabel(absl::string_view token, double* label) const {
    switch (options_.labels) {
      case LibsvmLabels::kBinary:
        if (*label == 1.0) return absl::OkStatus();
        if (*label == 0.0 || *label == -1.0) {
          *label = 0.0;
          return absl::OkStatus();
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "label ", QuoteToken(token), " is out of range (0/1 or -1/+1)"));
      case LibsvmLabels::kReal:
        if (std::isfinite(static_cast<float>(*label))) return absl::OkStatus();
        return absl::InvalidArgumentError(
            absl::StrCat("label ", QuoteToken(token), " does not fit a float"));
      case LibsvmLabels::kClass: {
        const double c = *label - static_cast<double>(options_.class_base);
        if (c == std::floor(c) && c >= 0 && c < options_.num_classes) {
          *label = c;
          return absl::OkStatus();
        }
        return absl::InvalidArgumentError(
            absl::StrCat("label ", QuoteToken(token), " is not a class in [",
                         options_.class_base, ", ",
                         options_.class_base + options_.num_classes, ")"));
      }
    }
    return absl::InternalError("unknown label kind");
  }

  const LibsvmOptions options_;
  const BatchSchema schema_;
};

}  // namespace

absl::StatusOr<BatchSchema> LibsvmSchema(const LibsvmOptions& options) {
  if (options.labels == LibsvmLabels::kClass && options.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("libsvm class labels need num_classes >= 2, got ",
                     options.num_classes));
  }
  if (options.dense_dim < 0 || options.dense_dim > kMaxDenseDim ||
      options.index_base < 0 || options.index_base > (int64_t{1} << 62)) {
    return absl::InvalidArgumentError(
        absl::StrCat("libsvm dense_dim must be in [0, ", kMaxDenseDim,
                     "] and index_base in [0, 2^62], got ", options.dense_dim,
                     " and ", options.index_base));
  }
  BatchSchema schema;
  if (options.dense_dim > 0) {
    schema.dense_dim = static_cast<int>(options.dense_dim);
  } else {
    schema.sparse.push_back({"features", /*weighted=*/true});
  }
  if (options.labels == LibsvmLabels::kClass) {
    schema.label_kind = LabelKind::kClass;
    schema.num_classes = options.num_classes;
  } else {
    schema.label_kind = LabelKind::kFloat;
  }
  return schema;
}

absl::StatusOr<std::unique_ptr<LineParser>> NewLibsvmParser(
    const LibsvmOptions& options) {
  absl::StatusOr<BatchSchema> schema = LibsvmSchema(options);
  if (!schema.ok()) return schema.status();
  return std::unique_ptr<LineParser>(
      std::make_unique<LibsvmParser>(options, *std::move(schema)));
}

}  // namespace ps::worker::data
