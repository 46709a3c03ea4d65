// The byte-level alphabet of GPT-2-style BPE vocabularies: each of the 256
// bytes stands for one printable character (the printable ASCII and Latin-1
// bytes for themselves, the others for U+0100 on), so that any byte string is
// a string of vocabulary symbols.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

// The UTF-8 of the character that stands for each byte.
const std::string &byteSymbol(uint8_t byte);

// The byte-level symbols of `bytes`, concatenated.
std::string toByteLevel(std::string_view bytes);

// The bytes that a token's byte-level symbols stand for. Characters outside
// the alphabet (in added tokens) are kept as their own UTF-8.
std::string fromByteLevel(std::string_view symbols);

} // namespace kiln::text
