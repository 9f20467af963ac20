#include "worker/client/topk_compression.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::client {

absl::StatusOr<TopKCompressor> TopKCompressor::Create(
    std::vector<int64_t> tensor_sizes, double ratio) {
  if (!(ratio > 0 && ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top-k ratio ", ratio, " outside (0, 1]"));
  }
  std::vector<int64_t> k;
  std::vector<std::vector<float>> residual;
  for (int64_t n : tensor_sizes) {
    if (n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("a tensor of ", n, " elements"));
    }
    k.push_back(std::clamp<int64_t>(
        static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n))), 1, n));
    residual.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  return TopKCompressor(std::move(k), std::move(residual));
}

absl::StatusOr<SparseGradient> TopKCompressor::Compress(
    int index, absl::Span<const float> grad) {
  if (index < 0 || index >= static_cast<int>(residual_.size()) ||
      grad.size() != residual_[index].size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient of tensor ", index, " with ", grad.size(), " elements"));
  }
  std::vector<float>& r = residual_[index];
  const int64_t n = static_cast<int64_t>(r.size());
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    r[i] += grad[i];
    finite = finite && std::isfinite(r[i]);
  }
  SparseGradient out;
  if (!finite) {
    // Everything goes, so that the shard sees (and refuses) the bad value.
    out.indices.resize(n);
    std::iota(out.indices.begin(), out.indices.end(), 0);
    out.values = r;
    std::fill(r.begin(), r.end(), 0.0f);
    return out;
  }
  const int64_t k = k_[index];
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  const auto larger = [&r](int64_t a, int64_t b) {
    const float x = std::fabs(r[a]), y = std::fabs(r[b]);
    return x > y || (x == y && a < b);
  };
  if (k < n) {
    std::nth_element(order_.begin(), order_.begin() + k, order_.end(), larger);
  }
  out.indices.assign(order_.begin(), order_.begin() + k);
  std::sort(out.indices.begin(), out.indices.end());
  out.values.reserve(k);
  for (int64_t i : out.indices) {
    out.values.push_back(r[i]);
    r[i] = 0.0f;
  }
  return out;
}

void TopKCompressor::Reset() {
  for (std::vector<float>& r : residual_) std::fill(r.begin(), r.end(), 0.0f);
}

}  // namespace ps::client
