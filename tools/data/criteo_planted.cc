#include "tools/data/criteo_planted.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/data/random.h"

namespace ps::data_tools {
namespace {

using worker::data::HashWords;
using worker::data::Mix64;
using worker::data::SplitMix64;

constexpr int kIntegers = 13;
constexpr int kFields = 26;
constexpr int kCalibrationSample = 20000;
constexpr int kCalibrationStream = 7;
constexpr double kSqrt3 = 1.7320508075688772;
constexpr int64_t kMaxInteger = 1000000000;
// Salts that keep the hashes of effects, latents and weights apart.
constexpr uint64_t kEffectSalt = 0x656666656374ULL;
constexpr uint64_t kLatentSalt = 0x6c6174656e74ULL;
constexpr uint64_t kWeightSalt = 0x776569676874ULL;
constexpr uint64_t kIdSalt = 0x69647300ULL;

// The Kaggle display-advertising challenge's distinct values per
// categorical field (as counted by DLRM's preprocessing).
constexpr std::array<int64_t, kFields> kKaggleCardinality = {
    1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
    93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
    2173,  4,    7046547,  18,      15,  286181, 105,     142572};
// Effect scale per field before `signal`: four strong, eight medium, six
// weak-medium, five weak, three without effect.
constexpr std::array<double, kFields> kFieldSigma = {
    0.5, 0.3, 0.3, 0.2, 0.5, 0.1, 0.3, 0.2, 0.0, 0.3, 0.2, 0.3, 0.1,
    0.5, 0.2, 0.3, 0.1, 0.2, 0.0, 0.1, 0.3, 0.0, 0.5, 0.2, 0.0, 0.1};
// Roughly the Kaggle data's missing rates.
constexpr std::array<double, kFields> kFieldMissing = {
    0, 0, 0.03, 0.03, 0, 0,    0,    0,    0,    0, 0,    0.03, 0,
    0, 0, 0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44};
constexpr std::array<double, kIntegers> kIntegerMissing = {
    0.45,   0,    0.21, 0.22, 0.03, 0.22, 0.04,
    0.0005, 0.04, 0.45, 0.04, 0.77, 0.22};
constexpr std::array<double, kIntegers> kIntegerMu = {
    0.7, 1.5, 2.2, 1.8, 7.5, 4.0, 1.5, 2.5, 3.8, 0.4, 1.0, 0.4, 1.8};
constexpr std::array<double, kIntegers> kIntegerSd = {
    1.0, 1.5, 1.5, 1.0, 2.0, 1.8, 1.5, 1.0, 1.3, 0.6, 1.0, 0.8, 1.2};

// Uniform in [-1, 1) from a hash.
double Symmetric(uint64_t hash) {
  return 2.0 * static_cast<double>(hash >> 11) * 0x1.0p-53 - 1.0;
}

double Normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.Uniform();  // (0, 1]
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// MurmurHash3's 32-bit finaliser: a bijection of uint32.
uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

void AppendHex8(uint32_t v, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char buf[8];
  for (int i = 7; i >= 0; --i) {
    buf[i] = kDigits[v & 0xf];
    v >>= 4;
  }
  out->append(buf, 8);
}

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, result.ptr);
}

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

absl::StatusOr<CriteoPlanted> CriteoPlanted::Create(
    const CriteoPlantedOptions& options) {
  if (!(options.ctr >= 0.03 && options.ctr <= 0.25)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ctr must be in [0.03, 0.25], got ", options.ctr));
  }
  if (!(options.vocab_scale > 0) || options.max_vocab < 2 ||
      options.max_vocab > (int64_t{1} << 31) || !(options.signal >= 0) ||
      options.interaction_rank < 0 || options.interaction_rank > 64 ||
      !(options.interaction_scale >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad planted model: vocab_scale ", options.vocab_scale,
        " (> 0), max_vocab ", options.max_vocab, " (2 .. 2^31), signal ",
        options.signal, " (>= 0), interaction_rank ", options.interaction_rank,
        " (0 .. 64), interaction_scale ", options.interaction_scale,
        " (>= 0)"));
  }
  std::vector<Field> fields;
  for (int f = 0; f < kFields; ++f) {
    const double scaled = std::ceil(static_cast<double>(kKaggleCardinality[f]) *
                                    options.vocab_scale);
    const int64_t vocab = std::clamp<int64_t>(
        scaled > 1e18 ? options.max_vocab : static_cast<int64_t>(scaled), 2,
        options.max_vocab);
    absl::StatusOr<ZipfSampler> zipf =
        ZipfSampler::Create(vocab, options.zipf_exponent);
    if (!zipf.ok()) return zipf.status();
    fields.push_back(Field{
        vocab, kFieldSigma[f] * options.signal, kFieldMissing[f],
        static_cast<uint32_t>(HashWords(options.seed, kIdSalt, f)), *zipf});
  }
  std::vector<Integer> integers;
  for (int i = 0; i < kIntegers; ++i) {
    // About a quarter of a standard deviation of log-odds per standard
    // deviation of log(1 + x), in either direction.
    const double weight = options.signal * 0.25 / kIntegerSd[i] *
                          Symmetric(HashWords(options.seed, kWeightSalt, i));
    integers.push_back(
        Integer{kIntegerMu[i], kIntegerSd[i], kIntegerMissing[i], weight});
  }
  CriteoPlanted model(options, std::move(fields), std::move(integers));

  // Solve for the bias on a fixed sample: the mean probability increases
  // with it, from 0 to 1.
  std::vector<double> logits(kCalibrationSample);
  uint64_t unused;
  for (int i = 0; i < kCalibrationSample; ++i) {
    logits[i] = model.Draw(kCalibrationStream, i, nullptr, &unused);
  }
  double lo = -40.0;
  double hi = 40.0;
  for (int iter = 0; iter < 100; ++iter) {
    const double mid = 0.5 * (lo + hi);
    double mean = 0.0;
    for (const double z : logits) mean += Sigmoid(mid + z);
    mean /= kCalibrationSample;
    (mean < options.ctr ? lo : hi) = mid;
  }
  model.bias_ = 0.5 * (lo + hi);
  return model;
}

CriteoPlanted::CriteoPlanted(const CriteoPlantedOptions& options,
                             std::vector<Field> fields,
                             std::vector<Integer> integers)
    : options_(options),
      fields_(std::move(fields)),
      integers_(std::move(integers)) {
  if (options.interaction_rank > 0) {
    // Components of variance tau^2 make the sum over the 28 pairs and k
    // components have variance 28 k tau^4 = interaction_scale^2.
    const int pairs =
        kPlantedInteractionFields * (kPlantedInteractionFields - 1) / 2;
    latent_scale_ =
        std::pow(options.interaction_scale * options.interaction_scale /
                     (pairs * options.interaction_rank),
                 0.25);
  }
}

double CriteoPlanted::Effect(int field, int64_t rank) const {
  return fields_[field].sigma * kSqrt3 *
         Symmetric(HashWords(options_.seed ^ kEffectSalt, field, rank));
}

double CriteoPlanted::Latent(int field, int64_t rank, int component) const {
  return latent_scale_ * kSqrt3 *
         Symmetric(Mix64(HashWords(options_.seed ^ kLatentSalt, field, rank) +
                         component));
}

double CriteoPlanted::Draw(int stream, int64_t index, std::string* line,
                           uint64_t* label_bits) const {
  SplitMix64 rng(HashWords(options_.seed, static_cast<uint64_t>(stream) + 1,
                           static_cast<uint64_t>(index)));
  double logit = 0.0;
  for (int i = 0; i < kIntegers; ++i) {
    const Integer& feature = integers_[i];
    if (line != nullptr) line->push_back('\t');
    if (rng.Uniform() < feature.missing) continue;
    const double value = std::exp(feature.mu + feature.sd * Normal(rng));
    int64_t x =
        value >= kMaxInteger ? kMaxInteger : static_cast<int64_t>(value) - 1;
    if (i == 1 && rng.Uniform() < 0.05)
      x = -1 - static_cast<int64_t>(rng.Next() & 1);
    logit += feature.weight *
             std::log1p(static_cast<double>(std::max<int64_t>(x, 0)));
    if (line != nullptr) AppendInt(x, line);
  }
  const int rank = options_.interaction_rank;
  std::array<double, 64> sum{};
  std::array<double, 64> sum_squares{};
  for (int f = 0; f < kFields; ++f) {
    const Field& field = fields_[f];
    if (line != nullptr) line->push_back('\t');
    // Rank 0 stands for "missing".
    int64_t r = 0;
    if (!(rng.Uniform() < field.missing)) {
      r = field.zipf.Sample(rng);
      if (line != nullptr) {
        AppendHex8(Fmix32(static_cast<uint32_t>(r) ^ field.salt), line);
      }
    }
    logit += Effect(f, r);
    if (f < kPlantedInteractionFields) {
      for (int c = 0; c < rank; ++c) {
        const double v = Latent(f, r, c);
        sum[c] += v;
        sum_squares[c] += v * v;
      }
    }
  }
  // The sum over pairs f < g of v_f v_g, per component.
  for (int c = 0; c < rank; ++c) {
    logit += 0.5 * (sum[c] * sum[c] - sum_squares[c]);
  }
  *label_bits = rng.Next();
  return logit;
}

CriteoPlanted::Impression CriteoPlanted::Generate(int stream, int64_t index,
                                                  std::string* line) const {
  const size_t label_at = line->size();
  line->push_back('0');
  uint64_t label_bits = 0;
  Impression impression;
  impression.logit = bias_ + Draw(stream, index, line, &label_bits);
  const double u = static_cast<double>(label_bits >> 11) * 0x1.0p-53;
  impression.label = u < Sigmoid(impression.logit) ? 1 : 0;
  (*line)[label_at] = impression.label ? '1' : '0';
  return impression;
}

}  // namespace ps::data_tools
