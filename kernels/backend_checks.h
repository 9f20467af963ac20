#ifndef PS_KERNELS_BACKEND_CHECKS_H_
#define PS_KERNELS_BACKEND_CHECKS_H_

// Private to kernels/backend*.cc: the argument checks every op shares. Each
// returns INVALID_ARGUMENT naming the op and the argument.

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace ps::kernels::internal {

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

template <typename T>
absl::Status CheckSpan(const char* op, const char* name, DeviceSpan<T> s) {
  if (s.size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " has negative size ", s.size));
  }
  if (s.size > 0 && s.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name,
                     " is a null buffer (or a view larger "
                     "than its buffer)"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CheckMatrix(const char* op, const char* name, DeviceMatrix<T> m) {
  if (m.rows < 0 || m.cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " has negative shape [", m.rows, ", ", m.cols, "]"));
  }
  if (m.cols > 0 && m.rows > std::numeric_limits<int64_t>::max() / m.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " size overflows int64"));
  }
  if (m.rows > 0 && m.cols > 0 && m.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name,
                     " is a null buffer (or a view larger "
                     "than its buffer)"));
  }
  return absl::OkStatus();
}

inline absl::Status CheckSameSize(const char* op, const char* a_name, int64_t a,
                                  const char* b_name, int64_t b) {
  if (a != b) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", a_name, " has ", a, " elements but ", b_name, " has ", b));
  }
  return absl::OkStatus();
}

inline absl::Status CheckRowsFitInt32(const char* op, int64_t rows,
                                      int64_t cols) {
  if (rows > kInt32Max || cols > kInt32Max) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": shape [", rows, ", ", cols, "] exceeds the int32 range"));
  }
  return absl::OkStatus();
}

inline absl::Status CheckHalfType(const char* op, DType t) {
  if (t != DType::kF16 && t != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": dtype ", static_cast<int>(t), " is not fp16 or bf16"));
  }
  return absl::OkStatus();
}

// A matrix that may be a column block of a wider one: ld 0 (dense) or in
// [cols, 2^62), and its rows * stride addressable.
template <typename T>
absl::Status CheckStridedMatrix(const char* op, const char* name,
                                DeviceMatrix<T> m) {
  const int64_t ld = m.ld;
  if (ld != 0 && (ld < m.cols || ld > (int64_t{1} << 62))) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " has row stride ", m.ld, " for ", m.cols, " columns"));
  }
  if (m.rows > 0 && m.stride() > 0 &&
      m.rows > std::numeric_limits<int64_t>::max() / m.stride()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " size overflows int64"));
  }
  return CheckMatrix(op, name, m);
}

// A dense matrix (ld 0 or cols).
template <typename T>
absl::Status CheckDenseMatrix(const char* op, const char* name,
                              DeviceMatrix<T> m) {
  if (m.ld != 0 && m.ld != m.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " must be a dense matrix (row stride ",
                     m.ld, " for ", m.cols, " columns)"));
  }
  return CheckMatrix(op, name, m);
}

template <typename T>
absl::Status CheckShape(const char* op, const char* name, DeviceMatrix<T> m,
                        int64_t rows, int64_t cols) {
  if (m.rows != rows || m.cols != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " is [", m.rows, ", ", m.cols,
                     "] but must be [", rows, ", ", cols, "]"));
  }
  return absl::OkStatus();
}

}  // namespace ps::kernels::internal

#endif  // PS_KERNELS_BACKEND_CHECKS_H_
