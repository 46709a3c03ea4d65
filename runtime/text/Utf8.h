// UTF-8 as the tokenizer meets it: checking that user text is UTF-8 before
// any pattern runs over it, and streaming decoded tokens without splitting a
// character across two pieces of output.
#pragma once

#include "runtime/core/Utf8.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text {

using kiln::appendUtf8;
using kiln::describeInvalidUtf8;
using kiln::firstInvalidUtf8;

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
