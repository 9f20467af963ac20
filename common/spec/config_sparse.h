// Internal to //common/spec:config. The rules and defaults of optimizer specs
// (the job's, for dense tensors, and each sparse table's) and of sparse
// tables (proto/config.proto, SparseTableSpec).
#ifndef PS_COMMON_SPEC_CONFIG_SPARSE_H_
#define PS_COMMON_SPEC_CONFIG_SPARSE_H_

#include <initializer_list>
#include <utility>
#include <vector>

#include "common/spec/config_violations.h"
#include "proto/config.pb.h"

namespace ps::config_internal {

// `at` prefixes the path of the optimizer spec being checked ("optimizer" or
// "model.sparse_tables[i].optimizer").
class OptimizerPath {
 public:
  explicit OptimizerPath(std::vector<PathElem> prefix)
      : prefix_(std::move(prefix)) {}
  std::vector<PathElem> operator()(std::initializer_list<PathElem> rest) const {
    std::vector<PathElem> path = prefix_;
    path.insert(path.end(), rest.begin(), rest.end());
    return path;
  }

 private:
  std::vector<PathElem> prefix_;
};

// SGD, ADAGRAD, ADAM, FTRL (or unset: SGD).
bool IsSparseKind(OptimizerSpec::Kind kind);

// `sparse`: the spec of a sparse table (kinds SGD, ADAGRAD, ADAM, FTRL), else
// the job's, which the dense tensors use (SGD, MOMENTUM, ADAM).
void CheckOptimizer(const OptimizerSpec& o, const OptimizerPath& at,
                    bool sparse, Violations& v);

// model.sparse_tables: names unique among tables and tensors, dims, dtypes,
// initializers, optimizers (a table without one needs a job optimizer of a
// sparse kind), capacity, eviction and admission.
void CheckSparseTables(const JobSpec& spec, Violations& v);

// Fills in the defaults of proto/config.proto. Idempotent.
void NormalizeOptimizer(OptimizerSpec* o);

// Fills in a table's defaults; a table without an optimizer gets a copy of
// `job_optimizer` (normalised already). Idempotent.
void NormalizeSparseTable(const OptimizerSpec& job_optimizer,
                          SparseTableSpec* t);

}  // namespace ps::config_internal

#endif  // PS_COMMON_SPEC_CONFIG_SPARSE_H_
