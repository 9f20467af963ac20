// The Criteo display-advertising TSV format (the Kaggle challenge's train.txt
// and the 1 TB click logs' day_N files): per line, tab-separated,
//   label  I1 .. I13  C1 .. C26
// label is 0 or 1 (a click), I1..I13 are integers (I2 may be negative),
// C1..C26 are categorical ids written as hex (8 digits in the real data),
// and any feature may be empty (missing). Kaggle's test.txt has no label
// column: set has_label = false.
//
// What a line becomes (batch.h):
//   dense [13]: log(1 + max(x, 0)) of each integer; missing -> 0.0, the same
//     as a value of 0 (negative values, only in I2, are clamped to 0 as DLRM's
//     preprocessing does);
//   26 sparse fields "C1".."C26", one id each: CriteoKey(field, id); a missing
//     id becomes CriteoMissingKey(field) (a key of its own per field, so the
//     model can learn what absence means), or an empty bag with
//     MissingCategorical::kEmptyBag;
//   label: 0.0 or 1.0 (LabelKind::kFloat); kNone without a label column.
// Bad lines: a field count other than 40 (39 without labels), a label other
// than "0" or "1", an integer that does not parse, an id that is not 1 to 16
// hex digits.
#ifndef PS_WORKER_DATA_CRITEO_FORMAT_H_
#define PS_WORKER_DATA_CRITEO_FORMAT_H_

#include <cstdint>
#include <memory>

#include "worker/data/batch.h"
#include "worker/data/line_parser.h"

namespace ps::worker::data {

inline constexpr int kCriteoIntegerFeatures = 13;
inline constexpr int kCriteoCategoricalFeatures = 26;
inline constexpr uint64_t kDefaultCriteoHashSeed = 0x43726974656f3130ULL;

enum class MissingCategorical { kMissingKey, kEmptyBag };

struct CriteoOptions {
  bool has_label = true;
  // Salts every field's hash: the same data with another seed gives other
  // keys (e.g. to decorrelate two jobs' tables).
  uint64_t hash_seed = kDefaultCriteoHashSeed;
  MissingCategorical missing_categorical = MissingCategorical::kMissingKey;
};

// The uint64 key of hex id `value` in categorical field `field` (0-based: C1
// is field 0): Mix64(value ^ salt(field)), where salt(field) is a hash of
// (hash_seed, field). Mix64 is a bijection, so within a field distinct ids
// never share a key; the same id in two fields gets two unrelated keys.
uint64_t CriteoKey(int field, uint64_t value,
                   uint64_t hash_seed = kDefaultCriteoHashSeed);
// The key a missing id of field `field` gets: a separate hash of the field's
// salt (one id value per field shares it, a 64-bit value no real id has
// been seen to take).
uint64_t CriteoMissingKey(int field,
                          uint64_t hash_seed = kDefaultCriteoHashSeed);
// log(1 + max(x, 0)) as the dense feature.
float CriteoDenseValue(int64_t x);

BatchSchema CriteoSchema(const CriteoOptions& options);
std::unique_ptr<LineParser> NewCriteoParser(const CriteoOptions& options);

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_CRITEO_FORMAT_H_
