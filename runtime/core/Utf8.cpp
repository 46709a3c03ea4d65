#include "runtime/core/Utf8.h"

#include <algorithm>
#include <cstdio>

namespace kiln {

size_t utf8SequenceAt(std::string_view text, size_t at, bool *truncated) {
  *truncated = false;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(at);
  if (lead < 0x80)
    return 1;
  size_t length;
  uint8_t low = 0x80, high = 0xbf; // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf)
    length = 2;
  else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0)
      low = 0xa0; // overlong
    if (lead == 0xed)
      high = 0x9f; // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0)
      low = 0x90; // overlong
    if (lead == 0xf4)
      high = 0x8f; // past U+10FFFF
  } else
    return 0;
  for (size_t i = 1; i < length; ++i) {
    if (at + i >= text.size()) {
      *truncated = true;
      return 0;
    }
    const uint8_t c = byte(at + i);
    if (i == 1 ? (c < low || c > high) : (c < 0x80 || c > 0xbf))
      return 0;
  }
  return length;
}

size_t firstInvalidUtf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    bool truncated = false;
    const size_t length = utf8SequenceAt(text, at, &truncated);
    if (length == 0)
      return at;
    at += length;
  }
  return std::string_view::npos;
}

std::string describeInvalidUtf8(std::string_view text, size_t offset) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", static_cast<uint8_t>(text[offset]));
  return "byte " + std::to_string(offset) + " (" + hex + ") is not UTF-8";
}

size_t utf8LengthOf(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}

uint32_t decodeUtf8At(std::string_view text, size_t at, size_t *length) {
  const auto lead = static_cast<uint8_t>(text[at]);
  *length = std::min(utf8LengthOf(lead), text.size() - at);
  uint32_t codePoint = *length == 1 ? lead : lead & (0x3f >> (*length - 1));
  for (size_t i = 1; i < *length; ++i)
    codePoint = (codePoint << 6) | (static_cast<uint8_t>(text[at + i]) & 0x3f);
  return codePoint;
}

void appendUtf8(std::string &out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

} // namespace kiln
