// The bf16 conversions every bf16 kernel and tensor uses (sim/bf16.h): rounding to nearest,
// ties to even, and the special values, checked on every one of the 65,536 bf16 values where
// it matters. (Split from kernels_test.cc, which checks the kernels' arithmetic.)
#include "sim/bf16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace nrtsim {
namespace {

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

TEST(Bf16Test, ExactValuesAreUnchanged) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.5f), 0x3F00);
  EXPECT_EQ(FloatToBf16(3.140625f), 0x4049);
  EXPECT_EQ(Bf16ToFloat(0x3FC0), 1.5f);
  EXPECT_EQ(Bf16ToFloat(0xC040), -3.0f);
}

TEST(Bf16Test, EveryBf16ValueRoundTrips) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const bool nan = (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
    // A signalling NaN comes back quiet; everything else comes back bit for bit.
    const uint16_t want = static_cast<uint16_t>(nan ? (b | 0x0040) : b);
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(b))), want) << std::hex << b;
  }
}

TEST(Bf16Test, TiesRoundToEven) {
  // Halfway between 1.0 (even mantissa) and 1 + 2^-7 (odd): down to 1.0.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-(1.0f + 0x1p-8f)), 0xBF80);
  // Halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  // Off the tie, nearest wins either way.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f - 0x1p-23f), 0x3F81);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-9f), 0x3F80);
}

TEST(Bf16Test, NanStaysQuietNan) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        FloatFromBits(0x7F800001),   // payload only in bits bf16 drops
                        FloatFromBits(0x7FFFFFFF),   // would carry into the sign if rounded
                        FloatFromBits(0xFFC00000)};  // negative
  for (float f : nans) {
    const uint16_t b = FloatToBf16(f);
    EXPECT_TRUE(std::isnan(Bf16ToFloat(b))) << std::hex << b;
    EXPECT_NE(b & 0x0040, 0) << "not quiet: " << std::hex << b;
    EXPECT_EQ(std::signbit(Bf16ToFloat(b)), std::signbit(f));
  }
}

TEST(Bf16Test, InfinitiesStayInfinite) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16(inf), 0x7F80);
  EXPECT_EQ(FloatToBf16(-inf), 0xFF80);
  EXPECT_EQ(Bf16ToFloat(0x7F80), inf);
  EXPECT_EQ(Bf16ToFloat(0xFF80), -inf);
}

TEST(Bf16Test, OverflowRoundsToInfinity) {
  const float max = std::numeric_limits<float>::max();
  EXPECT_EQ(FloatToBf16(max), 0x7F80);
  EXPECT_EQ(FloatToBf16(-max), 0xFF80);
  // The largest finite bf16 is (2 - 2^-7) * 2^127; its mantissa is odd, so the tie with 2^128
  // rounds up to infinity and anything below the tie stays finite.
  EXPECT_EQ(Bf16ToFloat(0x7F7F), 0x1.FEp127f);
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x7F7F8000)), 0x7F80);
}

TEST(Bf16Test, NegativeZeroKeepsItsSign) {
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(Bf16ToFloat(0x8000)));
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x80000001)), 0x8000);  // -2^-149 underflows to -0
}

TEST(Bf16Test, SubnormalsRoundLikeAnyValue) {
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x00010000)), 0x0001);  // 2^-133: smallest bf16
  EXPECT_EQ(Bf16ToFloat(0x0001), 0x1p-133f);
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x00000001)), 0x0000);  // 2^-149: far below half
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x00008000)), 0x0000);  // tie, 0 is even
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x00008001)), 0x0001);
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x00018000)), 0x0002);  // tie, 2 is even
  EXPECT_EQ(FloatToBf16(FloatFromBits(0x007FFFFF)), 0x0080);  // up to the smallest normal
}

TEST(Bf16Test, RoundToBf16IsTheStoredValue) {
  EXPECT_EQ(RoundToBf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(RoundToBf16(3.14159265f), 3.140625f);
  EXPECT_EQ(RoundToBf16(-0.0f), 0.0f);
}

}  // namespace
}  // namespace nrtsim
