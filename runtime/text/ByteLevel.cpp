#include "runtime/text/ByteLevel.h"

#include "runtime/text/Utf8.h"

#include <array>
#include <unordered_map>

namespace kiln::text {
namespace {

struct Alphabet {
  std::array<std::string, 256> symbols;
  std::unordered_map<uint32_t, uint8_t> bytes; // code point -> byte

  Alphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      const uint32_t codePoint = printable ? b : next++;
      appendUtf8(symbols[b], codePoint);
      bytes.emplace(codePoint, static_cast<uint8_t>(b));
    }
  }
};

const Alphabet &alphabet() {
  static const Alphabet table;
  return table;
}

} // namespace

const std::string &byteSymbol(uint8_t byte) { return alphabet().symbols[byte]; }

std::string toByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes)
    out += byteSymbol(static_cast<uint8_t>(c));
  return out;
}

std::string fromByteLevel(std::string_view symbols) {
  const Alphabet &table = alphabet();
  std::string out;
  for (size_t at = 0; at < symbols.size();) {
    // Symbols are UTF-8 of code points below U+0200: one or two bytes.
    size_t length = 0;
    const uint32_t codePoint = decodeUtf8At(symbols, at, &length);
    const auto found = table.bytes.find(codePoint);
    if (found != table.bytes.end())
      out += static_cast<char>(found->second);
    else
      out.append(symbols, at, length);
    at += length;
  }
  return out;
}

} // namespace kiln::text
