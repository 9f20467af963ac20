#ifndef PS_KERNELS_TYPES_H_
#define PS_KERNELS_TYPES_H_

// Plain enums shared by the op API, the math headers and the CUDA kernels.
// No dependencies, so nvcc and device code can include it.

#include <cstdint>

namespace ps::kernels {

// Element types of device buffers. Half types are stored as their raw 16 bits
// (uint16_t) at the API.
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

enum class Transpose : int32_t { kNo = 0, kYes = 1 };

enum class Activation : int32_t { kRelu = 0, kTanh = 1, kSigmoid = 2 };

// [begin, end) of indices; empty when begin >= end.
struct IndexRange {
  int64_t begin;
  int64_t end;
};

// How an embedding bag combines its rows (kernels/embedding_math.h).
enum class EmbeddingBagMode : int32_t { kSum = 0, kMean = 1 };

// Seeded initializers. fan_in / fan_out are the weight's [in, out].
//   He:     std = sqrt(2 / fan_in),            uniform limit sqrt(6 / fan_in)
//   Xavier: std = sqrt(2 / (fan_in+fan_out)),  limit sqrt(6 / (fan_in+fan_out))
enum class Initializer : int32_t {
  kHeUniform = 0,
  kHeNormal = 1,
  kXavierUniform = 2,
  kXavierNormal = 3,
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_TYPES_H_
