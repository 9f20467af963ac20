#ifndef PS_KERNELS_BACKEND_TEST_UTIL_H_
#define PS_KERNELS_BACKEND_TEST_UTIL_H_

// Test-only helpers of the op suites (backend_test_suite.cc,
// backend_layer_test_suite.cc): random data, device round trips, and the
// |x - ref| <= atol + rtol * |ref| comparison.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace ps::kernels {

#define ASSERT_OK(expr)                          \
  do {                                           \
    const absl::Status s_ = (expr);              \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_; \
  } while (false)

inline constexpr int64_t kSizes[] = {1, 7, 129, 1000};

inline std::vector<float> RandomVector(int64_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - ref| <= atol + rtol * |ref| everywhere; reports the first miss.
inline void ExpectAllClose(const std::vector<float>& got,
                           const std::vector<double>& ref, double atol,
                           double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::abs(ref[i]))) {
      if (misses++ == 0) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i]
                      << ", reference " << ref[i];
      }
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size()
                       << " elements outside tolerance";
}

// Per-dtype tolerances for the new ops' checks. All ops compute in fp32.
struct Tolerance {
  double atol;
  double rtol;
};
// fp32 results of a few roundings (element-wise math, copies, short sums).
inline constexpr Tolerance kF32Elementwise{1e-6, 1e-5};
// fp32 sums of up to a few thousand terms (GEMM, convolution, reductions).
inline constexpr Tolerance kF32Accumulated{1e-5, 1e-4};
// An fp32 gradient against central finite differences of a double-precision
// reference (the differences themselves are accurate to ~1e-8).
inline constexpr Tolerance kF32VsFiniteDifference{1e-4, 1e-3};

inline void ExpectAllClose(const std::vector<float>& got,
                           const std::vector<double>& ref, Tolerance tol,
                           const std::string& what) {
  ExpectAllClose(got, ref, tol.atol, tol.rtol, what);
}

inline std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// d/dx_i of f at x by central differences, for every element of x.
inline std::vector<double> FiniteDifferences(
    const std::function<double(const std::vector<double>&)>& f,
    std::vector<double> x, double eps) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = f(x);
    x[i] = saved - eps;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Uploads host data into a fresh device buffer.
template <typename T>
DeviceBuffer ToDevice(Backend& backend, const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> buffer =
      backend.AllocateArray<T>(std::max<int64_t>(1, host.size()));
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  const absl::Status s =
      backend.CopyToDevice(host.data(), buffer->data(),
                           static_cast<int64_t>(host.size() * sizeof(T)));
  EXPECT_TRUE(s.ok()) << s;
  return *std::move(buffer);
}

template <typename T>
DeviceBuffer Zeros(Backend& backend, int64_t n) {
  return ToDevice(backend, std::vector<T>(static_cast<size_t>(n), T{}));
}

template <typename T>
std::vector<T> ToHost(Backend& backend, const DeviceBuffer& buffer, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  const absl::Status s = backend.CopyToHost(
      buffer.data(), host.data(), n * static_cast<int64_t>(sizeof(T)));
  EXPECT_TRUE(s.ok()) << s;
  return host;
}
}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_TEST_UTIL_H_
