#ifndef PS_KERNELS_RANDOM_MATH_H_
#define PS_KERNELS_RANDOM_MATH_H_

// Counter-based random initializers: element i of a tensor is a pure function
// of (seed, i), so any backend, grid shape or thread count gives the same
// values. Uniform values are bit-identical across backends; normal values go
// through double-precision log/cos and agree to within one float ulp.

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/types.h"

namespace ps::kernels {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix.
PS_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

PS_HOST_DEVICE inline uint64_t CounterHash(uint64_t seed, uint64_t counter) {
  return SplitMix64(SplitMix64(seed) ^
                    SplitMix64(counter ^ 0x5851f42d4c957f2dull));
}

// Uniform in (0, 1], 53 bits.
PS_HOST_DEVICE inline double UnitIntervalOpenZero(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1p-53;
}

// The value of element `index` of a [fan_in, fan_out] weight.
PS_HOST_DEVICE inline float InitializerValue(Initializer kind, uint64_t seed,
                                             uint64_t index, int64_t fan_in,
                                             int64_t fan_out) {
  const bool he =
      kind == Initializer::kHeUniform || kind == Initializer::kHeNormal;
  const double fan =
      he ? static_cast<double>(fan_in) : static_cast<double>(fan_in + fan_out);
  const uint64_t bits = CounterHash(seed, index);
  if (kind == Initializer::kHeUniform || kind == Initializer::kXavierUniform) {
    const double limit = sqrt(6.0 / fan);
    // 24 random bits: u in [0, 1) exactly, 2u - 1 in [-1, 1) exactly.
    const double u = static_cast<double>(bits >> 40) * 0x1p-24;
    return static_cast<float>(limit * (2.0 * u - 1.0));
  }
  // Box-Muller on two independent uniforms.
  const double stddev = sqrt(2.0 / fan);
  const double u1 = UnitIntervalOpenZero(bits);
  const double u2 = UnitIntervalOpenZero(SplitMix64(bits));
  const double two_pi = 6.283185307179586476925286766559;
  return static_cast<float>(stddev * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_RANDOM_MATH_H_
