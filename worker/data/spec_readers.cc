#include "worker/data/spec_readers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/data/criteo_format.h"
#include "worker/data/libsvm_format.h"
#include "worker/data/movielens_format.h"
#include "worker/data/text_count.h"

namespace ps::worker::data {
namespace {

LibsvmOptions LibsvmOptionsFor(const LibsvmFormatSpec& s) {
  LibsvmOptions o;
  switch (s.labels()) {
    case LibsvmFormatSpec::REAL:
      o.labels = LibsvmLabels::kReal;
      break;
    case LibsvmFormatSpec::CLASS:
      o.labels = LibsvmLabels::kClass;
      break;
    default:
      o.labels = LibsvmLabels::kBinary;
  }
  o.num_classes = s.num_classes();
  o.class_base = s.class_base();
  o.dense_dim = s.dense_dim();
  if (s.has_index_base()) o.index_base = s.index_base();
  return o;
}

MovieLensOptions MovieLensOptionsFor(const MovieLensFormatSpec& s) {
  MovieLensOptions o;
  switch (s.separator()) {
    case MovieLensFormatSpec::TAB:
      o.separator = RatingsSeparator::kTab;
      break;
    case MovieLensFormatSpec::DOUBLE_COLON:
      o.separator = RatingsSeparator::kDoubleColon;
      break;
    default:
      o.separator = RatingsSeparator::kAuto;
  }
  if (s.min_rating() != 0 || s.max_rating() != 0) {
    o.min_rating = s.min_rating();
    o.max_rating = s.max_rating();
  }
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LineParser>> ParserForSpec(const DataSpec& d) {
  switch (d.format()) {
    case DataSpec::CRITEO: {
      CriteoOptions o;
      if (d.criteo().hash_seed() != 0) o.hash_seed = d.criteo().hash_seed();
      if (d.criteo().missing_as_empty_bag()) {
        o.missing_categorical = MissingCategorical::kEmptyBag;
      }
      return NewCriteoParser(o);
    }
    case DataSpec::LIBSVM:
      return NewLibsvmParser(LibsvmOptionsFor(d.libsvm()));
    case DataSpec::MOVIELENS:
      return NewMovieLensParser(MovieLensOptionsFor(d.movielens()));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("data format ", DataSpec::Format_Name(d.format()),
                       " is not a text format"));
  }
}

BadLinePolicy BadLinePolicyForSpec(const DataSpec& d) {
  BadLinePolicy p;
  if (d.has_max_bad_line_fraction()) p.max_fraction = d.max_bad_line_fraction();
  p.min_bad_lines = d.has_min_bad_lines() ? d.min_bad_lines() : 10;
  return p;
}

absl::StatusOr<std::unique_ptr<BatchReader>> OpenSpecReader(
    const DataSpec& d, const std::vector<std::string>& files, uint64_t seed,
    const ShardSpec& shard) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser = ParserForSpec(d);
  if (!parser.ok()) return parser.status();
  TextReaderOptions o;
  o.files = files;
  o.shuffle_buffer = d.shuffle_buffer();
  o.seed = seed;
  o.bad_lines = BadLinePolicyForSpec(d);
  return OpenTextReader(o, std::move(*parser), shard);
}

absl::StatusOr<std::vector<int64_t>> CountShardExamples(const DataSpec& d,
                                                        int num_shards,
                                                        ReaderStats* stats) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser = ParserForSpec(d);
  if (!parser.ok()) return parser.status();
  TextReaderOptions o;
  o.files.assign(d.train_files().begin(), d.train_files().end());
  o.bad_lines = BadLinePolicyForSpec(d);
  return CountTextShardExamples(o, std::move(*parser), num_shards, stats);
}

}  // namespace ps::worker::data
