#include "kernels/gemm_probe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/status_macros.h"

namespace ps::kernels {

absl::StatusOr<double> ProbeGemmGflops(Backend& backend,
                                       const GemmProbeOptions& options) {
  const int64_t n = options.n;
  if (n < 1 || n > 8192 || options.min_calls < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GEMM probe: n must be in [1, 8192] and min_calls >= 1, got n=", n,
        ", min_calls=", options.min_calls));
  }
  absl::StatusOr<DeviceBuffer> a = backend.AllocateArray<float>(n * n);
  absl::StatusOr<DeviceBuffer> b = backend.AllocateArray<float>(n * n);
  absl::StatusOr<DeviceBuffer> c = backend.AllocateArray<float>(n * n);
  for (const auto* buffer : {&a, &b, &c}) {
    if (!buffer->ok()) return buffer->status();
  }
  // Ones times halves: every element of C is n / 2, exact in fp32.
  PS_KERNELS_RETURN_IF_ERROR(backend.Fill(1.0f, a->Span<float>()));
  PS_KERNELS_RETURN_IF_ERROR(backend.Fill(0.5f, b->Span<float>()));
  auto gemm = [&]() -> absl::Status {
    PS_KERNELS_RETURN_IF_ERROR(backend.Gemm(
        Transpose::kNo, Transpose::kNo, 1.0f, a->Matrix<float>(n, n),
        b->Matrix<float>(n, n), 0.0f, c->Matrix<float>(n, n)));
    return backend.Synchronize();
  };
  PS_KERNELS_RETURN_IF_ERROR(gemm());  // warm-up: lazy set-up, page faults
  double best_s = 0;
  const absl::Time start = absl::Now();
  for (int calls = 0;
       calls < options.min_calls || absl::Now() - start < options.budget;
       ++calls) {
    const absl::Time t0 = absl::Now();
    PS_KERNELS_RETURN_IF_ERROR(gemm());
    const double s = absl::ToDoubleSeconds(absl::Now() - t0);
    if (calls == 0 || s < best_s) best_s = s;
  }
  // Spot-check the product: its first and last element.
  const float* product = c->Span<float>().data;
  float first = 0, last = 0;
  PS_KERNELS_RETURN_IF_ERROR(
      backend.CopyToHost(product, &first, sizeof(float)));
  PS_KERNELS_RETURN_IF_ERROR(
      backend.CopyToHost(product + n * n - 1, &last, sizeof(float)));
  const float want = static_cast<float>(n) / 2;
  if (first != want || last != want) {
    return absl::InternalError(
        absl::StrCat("GEMM probe: the product is wrong (", first, " and ", last,
                     ", want ", want, "): the BLAS or device is broken"));
  }
  return 2.0 * n * n * n / std::max(best_s, 1e-9) / 1e9;
}

}  // namespace ps::kernels
