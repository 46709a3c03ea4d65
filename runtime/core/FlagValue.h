// Numbers given on command lines, parsed whole (no "2x", no silent
// truncation: every integer as 64 bits or the width it is stored in) and
// range-checked, with one wording for every tool's refusal. Each tool turns
// a refusal into its own usage error.
#pragma once

#include "runtime/core/QuoteName.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// `text` as an integer in [min, max], or nothing when it is not one (empty,
// trailing characters, out of the type's range or of [min, max]).
template <typename Int> std::optional<Int> integerIn(std::string_view text, Int min, Int max) {
  Int value{};
  const char *end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end || value < min || value > max)
    return std::nullopt;
  return value;
}

// `text` as a finite number (all of it, as strtod reads numbers), or
// nothing; each tool checks its own range.
inline std::optional<double> finiteNumber(const std::string &text) {
  char *end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

// "--flag: 'text' is not an integer in min..max".
template <typename Int>
std::string notAnIntegerIn(std::string_view flag, std::string_view text, Int min, Int max) {
  return std::string(flag) + ": " + quoteName(text) + " is not an integer in " +
         std::to_string(min) + ".." + std::to_string(max);
}

} // namespace kiln
