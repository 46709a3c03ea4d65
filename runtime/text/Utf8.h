// UTF-8 as the tokenizer meets it: checking that user text is UTF-8 before
// any pattern runs over it, and streaming decoded tokens without splitting a
// character across two pieces of output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

// The offset of the first byte that does not belong to a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF
// included), or npos when all of `text` is UTF-8.
size_t firstInvalidUtf8(std::string_view text);

// "byte 17 (0xff) is not UTF-8", for messages.
std::string describeInvalidUtf8(std::string_view text, size_t offset);

// Appends the UTF-8 encoding of `codePoint` (at most U+10FFFF).
void appendUtf8(std::string &out, uint32_t codePoint);

// Text decoded token by token: push() takes the bytes of the next tokens and
// returns the longest prefix of whole characters not returned yet; a
// character whose bytes straddle two tokens waits for the rest. finish()
// returns what is left (a truncated character as U+FFFD).
class Utf8Stream {
public:
  std::string push(std::string_view bytes);
  std::string finish();

private:
  std::string pending_;
};

} // namespace kiln::text
