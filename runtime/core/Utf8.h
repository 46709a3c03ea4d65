// UTF-8 well-formedness, shared by everything that meets user text: the
// tokenizer (text/Utf8.h streams it) and error messages, which never echo
// bytes that are not UTF-8 (QuoteName.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// The length of the well-formed UTF-8 sequence at `text[at]`, or 0 where
// there is none: a bad lead byte, a missing or bad continuation, an overlong
// form, a surrogate, a code point past U+10FFFF. `truncated` is set where
// the sequence is cut by the end of `text` (a possible prefix).
size_t utf8SequenceAt(std::string_view text, size_t at, bool *truncated);

// The offset of the first byte not in a well-formed sequence, or npos.
size_t firstInvalidUtf8(std::string_view text);

// "byte 17 (0xff) is not UTF-8", for messages.
std::string describeInvalidUtf8(std::string_view text, size_t offset);

// Leniently, for text already checked (or where a bad byte may decode to
// anything): the length its lead byte gives a sequence (1 to 4), and the
// code point at `text[at]` with its length, cut at the text's end.
size_t utf8LengthOf(uint8_t lead);
uint32_t decodeUtf8At(std::string_view text, size_t at, size_t *length);

// Appends the UTF-8 encoding of `codePoint` (at most U+10FFFF).
void appendUtf8(std::string &out, uint32_t codePoint);

} // namespace kiln
