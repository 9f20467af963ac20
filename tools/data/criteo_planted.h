// A click model with known parameters that writes Criteo-format lines
// (worker/data/criteo_format.h): the ground truth behind generated click
// logs, so tests and benchmarks know the best achievable AUC and log loss.
//
// The model, for one impression:
//   integer feature i (13): missing with a fixed probability (roughly the
//     Kaggle data's rates), else x = floor(exp(N(mu_i, sd_i))) - 1 (counts
//     with a heavy tail; I2 is sometimes -1 or -2, as in the real data);
//   categorical field f (26): missing with a fixed probability, else the id
//     of rank r ~ Zipf(zipf_exponent) over vocab_f ids, written as 8 hex
//     digits (a bijection of r per field, so ranks never collide);
//   logit = bias + sum_i w_i log(1 + max(x_i, 0))      (missing: 0)
//               + sum_f e_f(id_f)                     (missing: e_f(none))
//               + sum over pairs f < g of C1..C8 of <v_f(id_f), v_g(id_g)>
//   click ~ Bernoulli(sigmoid(logit)).
// Each effect e_f(r) is sigma_f * U(-sqrt3, sqrt3) from a hash of (seed, f,
// r), and each latent v_f(r) of interaction_rank components likewise: no
// tables, any vocabulary size. sigma_f follows a fixed pattern (a few strong
// fields, more medium and weak ones, four without effect) times `signal`.
// The bias is solved (bisection on a fixed sample of 20000 impressions) so
// that the mean click probability is `ctr`.
// The model is one a DLRM, FM or Wide & Deep can represent exactly: a linear
// part over the dense transform and one-hot ids, and rank-k pairwise
// interactions. What limits a learned model is the data: rare ids are seen
// seldom, so smaller vocabularies and more lines bring it nearer the truth.
#ifndef PS_TOOLS_DATA_CRITEO_PLANTED_H_
#define PS_TOOLS_DATA_CRITEO_PLANTED_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/data/zipf.h"

namespace ps::data_tools {

struct CriteoPlantedOptions {
  uint64_t seed = 1;
  double ctr = 0.1;  // in [0.03, 0.25]
  double zipf_exponent = 1.05;
  // Field f has min(kaggle_cardinality_f * vocab_scale, max_vocab) ids (at
  // least 2), kaggle_cardinality being the Kaggle data's counts (3 to 10^7).
  double vocab_scale = 1.0;
  int64_t max_vocab = 10000;
  double signal = 1.0;             // multiplies every effect
  int interaction_rank = 4;        // 0: no interactions
  double interaction_scale = 0.5;  // sd of the interaction term's sum
};

inline constexpr int kPlantedInteractionFields = 8;

class CriteoPlanted {
 public:
  // INVALID_ARGUMENT for ctr outside [0.03, 0.25], a non-positive exponent,
  // vocab_scale or max_vocab, a negative signal, rank outside [0, 64] or a
  // negative interaction scale, or a bias that cannot reach the ctr.
  static absl::StatusOr<CriteoPlanted> Create(
      const CriteoPlantedOptions& options);

  struct Impression {
    int label = 0;
    double logit = 0.0;  // the true log-odds of a click
  };

  // Appends impression `index` of stream `stream` (0 train, 1 test, any
  // other for other uses) as one line without its newline. A pure function
  // of (options, stream, index).
  Impression Generate(int stream, int64_t index, std::string* line) const;

  double bias() const { return bias_; }
  int64_t vocab(int field) const { return fields_[field].vocab; }
  const CriteoPlantedOptions& options() const { return options_; }

 private:
  struct Field {
    int64_t vocab = 0;
    double sigma = 0.0;
    double missing = 0.0;
    uint32_t salt = 0;
    ZipfSampler zipf;
  };
  struct Integer {
    double mu = 0.0;
    double sd = 1.0;
    double missing = 0.0;
    double weight = 0.0;
  };

  CriteoPlanted(const CriteoPlantedOptions& options, std::vector<Field> fields,
                std::vector<Integer> integers);
  // The logit without the bias; appends the line if `line` is not null.
  double Draw(int stream, int64_t index, std::string* line,
              uint64_t* label_bits) const;
  double Effect(int field, int64_t rank) const;
  double Latent(int field, int64_t rank, int component) const;

  CriteoPlantedOptions options_;
  std::vector<Field> fields_;
  std::vector<Integer> integers_;
  double latent_scale_ = 0.0;
  double bias_ = 0.0;
};

}  // namespace ps::data_tools

#endif  // PS_TOOLS_DATA_CRITEO_PLANTED_H_
