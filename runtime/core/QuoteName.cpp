#include "runtime/core/QuoteName.h"

#include "runtime/core/Utf8.h"

#include <cstdio>

namespace kiln {
namespace {

// Up to about `maxBytes` of `text` made printable; `cut` says whether the
// rest was left off.
std::string printable(std::string_view text, size_t maxBytes, bool *cut) {
  std::string out;
  size_t at = 0;
  while (at < text.size() && out.size() < maxBytes) {
    bool truncated = false;
    const size_t length = utf8SequenceAt(text, at, &truncated);
    const auto byte = static_cast<uint8_t>(text[at]);
    if (length == 0 || (length == 1 && (byte < 0x20 || byte == 0x7f))) {
      // Bytes that are not UTF-8, and control characters, as escapes.
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\x%02x", byte);
      out += byte == '\n' ? "\\n" : byte == '\t' ? "\\t" : escape;
      ++at;
      continue;
    }
    out.append(text, at, length);
    at += length;
  }
  *cut = at < text.size();
  return out;
}

} // namespace

std::string printableText(std::string_view text, size_t maxBytes) {
  bool cut = false;
  std::string out = printable(text, maxBytes, &cut);
  if (cut)
    out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string quoteName(std::string_view name) {
  bool cut = false;
  const std::string shown = printable(name, 200, &cut);
  if (!cut)
    return "'" + shown + "'";
  return "'" + shown + "...' (" + std::to_string(name.size()) + " bytes)";
}

} // namespace kiln
