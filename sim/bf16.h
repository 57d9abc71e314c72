// bfloat16 <-> float32 conversion, as a bf16 NeuronCore stores values.
//
// bf16 is the top half of an IEEE binary32: sign, the same 8-bit exponent, 7 stored mantissa
// bits (8 significant bits). Narrowing rounds to nearest, ties to even, like the hardware and
// like IEEE arithmetic: NaN stays a (quiet) NaN, infinities stay infinities, finite values past
// the largest bf16 round to infinity, subnormals round like any other value. Used by the
// simulator's kernels and by tests that need to predict their results.
//
// Header-only pure functions: thread-safe.
#ifndef NRTPROF_SIM_BF16_H_
#define NRTPROF_SIM_BF16_H_

#include <cstdint>
#include <cstring>

namespace nrtsim {

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // Rounding could carry a NaN's payload into the exponent, or truncation could drop a
    // payload held only in the low bits and leave an infinity; set the quiet bit instead.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding just under half a bf16 ulp, plus the kept LSB, makes truncation round to nearest
  // with ties to even. A carry out of the mantissa bumps the exponent, which is right, and
  // rounds the largest finite values up to infinity as IEEE overflow does.
  const uint32_t kept_lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + kept_lsb;
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The float32 value a bf16 tensor would hold after storing `f`.
inline float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace nrtsim

#endif  // NRTPROF_SIM_BF16_H_
