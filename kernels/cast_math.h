#ifndef PS_KERNELS_CAST_MATH_H_
#define PS_KERNELS_CAST_MATH_H_

// fp32 <-> fp16 / bf16 conversions on raw bits, round to nearest even, NaN
// kept quiet, overflow to infinity. Integer arithmetic only, so both backends
// produce the same bits. The only copy: the payload codec (common/) converts
// fp16 / bf16 messages with these too.

#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace ps::kernels {

PS_HOST_DEVICE inline uint32_t FloatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

PS_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

PS_HOST_DEVICE inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

PS_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t h) {
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

// Rounds `value >> shift` to nearest even (1 <= shift <= 31; value below
// 2^31, so the sum cannot overflow). Adding half an ulp less one, plus the
// kept lowest bit, carries into the result exactly when the dropped bits are
// above half, or at half with an odd result: no branch, which keeps the
// payload codec's conversion loops as fast as integer adds.
PS_HOST_DEVICE inline uint32_t ShiftRightRoundEven(uint32_t value,
                                                   uint32_t shift) {
  const uint32_t half_less_one = (1u << (shift - 1u)) - 1u;
  return (value + half_less_one + ((value >> shift) & 1u)) >> shift;
}

PS_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  const uint32_t u = FloatToBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 and above round to infinity (65504 is the largest half).
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal half: rebias the exponent by 127 - 15
    return static_cast<uint16_t>(sign |
                                 ShiftRightRoundEven(a - 0x38000000u, 13u));
  }
  // Subnormal half (units of 2^-24); 2^-25 and below round to zero.
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);
  const uint32_t exponent = a >> 23;  // 102..112 here
  const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign |
                               ShiftRightRoundEven(mantissa, 126u - exponent));
}

PS_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_CAST_MATH_H_
