// Internal to //common/spec:config. The rules of DataSpec's text formats
// (CRITEO, LIBSVM, MOVIELENS): what each format gives a model (its dense
// width, its sparse fields, its labels) and whether the model and the files
// fit it.
#ifndef PS_COMMON_SPEC_CONFIG_DATA_H_
#define PS_COMMON_SPEC_CONFIG_DATA_H_

#include <string>
#include <vector>

#include "common/spec/config.h"
#include "common/spec/config_violations.h"
#include "proto/config.pb.h"

namespace ps::config_internal {

// What a format's batches carry (worker/data/batch.h documents the same).
struct FormatFields {
  int64_t dense_dim = 0;  // 0: no dense features; -1: known once read (IDX)
  std::vector<std::string> sparse;                          // field names
  HeadSpec::Loss labels = HeadSpec::SOFTMAX_CROSS_ENTROPY;  // the head's fit
  std::string label_words;  // "classes", "clicks 0/1", "ratings"...
};
FormatFields FieldsOf(const DataSpec& data);

// The head the data's labels fit.
HeadSpec::Loss LossForLabels(const DataSpec& data);

// data: files present for a text format (with check_dataset_files), none
// for IDX, bad-line limits and format options in range.
void CheckDataFormat(const DataSpec& d, const ValidationOptions& options,
                     Violations& v);

// The model against the data's fields: a model with sparse tables or
// sparse inputs on IDX data, an input the format does not produce, a dense
// input of another width.
void CheckModelInputs(const JobSpec& spec, Violations& v);

}  // namespace ps::config_internal

#endif  // PS_COMMON_SPEC_CONFIG_DATA_H_
