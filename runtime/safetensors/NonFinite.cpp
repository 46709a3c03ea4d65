#include "runtime/safetensors/NonFinite.h"

#include <cstring>

namespace kiln {
namespace {

// A float format's bits: an element is non-finite when its exponent field
// is all ones; then it is infinite when its mantissa is zero (formats with
// infinities) and NaN otherwise. E4M3 (the "fn" variant) spends the all-ones
// exponent on numbers: only S.1111.111 is NaN.
template <typename Word> struct Format {
  Word exponent, mantissa;
  bool hasInfinity;
};

template <typename Word>
void count(const uint8_t *bytes, uint64_t size, Format<Word> f, NonFiniteCount &out) {
  const uint64_t n = size / sizeof(Word);
  for (uint64_t i = 0; i < n; ++i) {
    Word w;
    std::memcpy(&w, bytes + i * sizeof(Word), sizeof(Word));
    if ((w & f.exponent) != f.exponent)
      continue;
    const bool nan = f.hasInfinity ? (w & f.mantissa) != 0 : (w & f.mantissa) == f.mantissa;
    if (!nan && !f.hasInfinity)
      continue;
    ++(nan ? out.nans : out.infinities);
    if (out.first < 0)
      out.first = static_cast<int64_t>(i);
  }
}

} // namespace

NonFiniteCount countNonFinite(DType dtype, const uint8_t *bytes, uint64_t size) {
  NonFiniteCount out;
  switch (dtype) {
  case DType::F64:
    count<uint64_t>(bytes, size, {0x7ff0000000000000ull, 0x000fffffffffffffull, true}, out);
    break;
  case DType::F32:
    count<uint32_t>(bytes, size, {0x7f800000u, 0x007fffffu, true}, out);
    break;
  case DType::F16:
    count<uint16_t>(bytes, size, {0x7c00, 0x03ff, true}, out);
    break;
  case DType::BF16:
    count<uint16_t>(bytes, size, {0x7f80, 0x007f, true}, out);
    break;
  case DType::F8_E4M3:
    count<uint8_t>(bytes, size, {0x78, 0x07, false}, out);
    break;
  case DType::F8_E5M2:
    count<uint8_t>(bytes, size, {0x7c, 0x03, true}, out);
    break;
  default:
    break;
  }
  return out;
}

std::string describeNonFinite(const NonFiniteCount &count) {
  std::string text;
  if (count.nans)
    text += std::to_string(count.nans) + " NaN";
  if (count.infinities)
    text += (text.empty() ? "" : " and ") + std::to_string(count.infinities) + " infinite";
  const uint64_t all = count.nans + count.infinities;
  return text + (all == 1 ? " value" : " values") + " (the first at element " +
         std::to_string(count.first) + ")";
}

std::string nonFiniteLogits(const float *values, size_t count) {
  const NonFiniteCount found = countNonFinite(DType::F32, reinterpret_cast<const uint8_t *>(values),
                                              uint64_t{count} * sizeof(float));
  return found.any() ? "the logits hold " + describeNonFinite(found) : std::string();
}

} // namespace kiln
