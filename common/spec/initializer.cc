#include "common/spec/initializer.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/spec/model.h"

namespace ps {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a: stable across platforms and runs, unlike std::hash.
uint64_t HashName(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Uniform in (0, 1): 24 random bits, never exactly 0 (log() below).
double Uniform01(uint64_t key, uint64_t counter) {
  const uint64_t bits = SplitMix64(key ^ SplitMix64(counter)) >> 40;
  return (static_cast<double>(bits) + 0.5) / 16777216.0;
}

double StandardNormal(uint64_t key, int64_t index) {
  // Box-Muller on two uniforms drawn for this element only.
  const double u1 = Uniform01(key, 2 * static_cast<uint64_t>(index));
  const double u2 = Uniform01(key, 2 * static_cast<uint64_t>(index) + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

uint64_t SparseRowSeed(uint64_t seed, const std::string& table_name) {
  // Another derivation than the dense tensors' (SplitMix64(seed) ^ name):
  // a table and a tensor never share names, but keep them apart anyway.
  return SplitMix64(SplitMix64(seed) ^ HashName(table_name) ^ 0x5A17E5EEDull);
}

absl::Status InitializeSparseRowSeeded(const SparseTableSpec& table,
                                       uint64_t row_seed, uint64_t key,
                                       absl::Span<float> out) {
  if (static_cast<int64_t>(out.size()) != table.dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer: row of ", out.size(), " values for table '",
                     table.name(), "' of dim ", table.dim()));
  }
  const InitializerSpec& init = table.init();
  double scale = init.scale();
  if (scale == 0 && table.dim() > 0) scale = 1.0 / std::sqrt(table.dim());
  // Each key has its own stream: the element index is the counter.
  const uint64_t row_key = SplitMix64(row_seed ^ SplitMix64(key));
  switch (init.kind()) {
    case InitializerSpec::ZEROS:
      for (float& v : out) v = 0.0f;
      return absl::OkStatus();
    case InitializerSpec::CONSTANT:
      for (float& v : out) v = init.value();
      return absl::OkStatus();
    case InitializerSpec::KIND_UNSPECIFIED:
    case InitializerSpec::UNIFORM:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] =
            static_cast<float>(scale * (2.0 * Uniform01(row_key, 2 * i) - 1.0));
      }
      return absl::OkStatus();
    case InitializerSpec::NORMAL:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(
            scale * StandardNormal(row_key, static_cast<int64_t>(i)));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("initializer: kind ", static_cast<int>(init.kind()),
                       " does not apply to sparse table '", table.name(),
                       "' (ZEROS, CONSTANT, UNIFORM or NORMAL)"));
  }
}

absl::Status InitializeSparseRow(const SparseTableSpec& table, uint64_t seed,
                                 uint64_t key, absl::Span<float> out) {
  return InitializeSparseRowSeeded(table, SparseRowSeed(seed, table.name()),
                                   key, out);
}

absl::Status InitializeRange(const TensorSpec& tensor, uint64_t seed,
                             int64_t offset, absl::Span<float> out) {
  const int64_t n = NumElements(tensor);
  if (n < 0 || offset < 0 || offset + static_cast<int64_t>(out.size()) > n) {
    return absl::OutOfRangeError(absl::StrCat(
        "initializer: range [", offset, ", ", offset + out.size(),
        ") outside tensor '", tensor.name(), "' of ", n, " elements"));
  }
  const double fan_in = tensor.shape_size() > 0 ? tensor.shape(0) : 1;
  const double fan_out = tensor.shape_size() > 1 ? tensor.shape(1) : 1;
  InitializerSpec::Kind kind = tensor.init().kind();
  if (kind == InitializerSpec::KIND_UNSPECIFIED) {
    kind = tensor.shape_size() < 2 ? InitializerSpec::ZEROS
                                   : InitializerSpec::HE_UNIFORM;
  }
  const uint64_t key = SplitMix64(seed) ^ HashName(tensor.name());
  double scale = tensor.init().scale();
  bool normal = false;
  switch (kind) {
    case InitializerSpec::ZEROS:
    case InitializerSpec::CONSTANT:
      for (float& v : out)
        v = kind == InitializerSpec::ZEROS ? 0.0f : tensor.init().value();
      return absl::OkStatus();
    case InitializerSpec::UNIFORM:
      break;
    case InitializerSpec::NORMAL:
      normal = true;
      break;
    case InitializerSpec::HE_UNIFORM:
      scale = std::sqrt(6.0 / fan_in);
      break;
    case InitializerSpec::HE_NORMAL:
      scale = std::sqrt(2.0 / fan_in);
      normal = true;
      break;
    case InitializerSpec::XAVIER_UNIFORM:
      scale = std::sqrt(6.0 / (fan_in + fan_out));
      break;
    case InitializerSpec::XAVIER_NORMAL:
      scale = std::sqrt(2.0 / (fan_in + fan_out));
      normal = true;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("initializer: unknown kind ", static_cast<int>(kind),
                       " for tensor '", tensor.name(), "'"));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t index = offset + static_cast<int64_t>(i);
    const double r = normal ? StandardNormal(key, index)
                            : 2.0 * Uniform01(key, 2 * index) - 1.0;
    out[i] = static_cast<float>(scale * r);
  }
  return absl::OkStatus();
}

}  // namespace ps
