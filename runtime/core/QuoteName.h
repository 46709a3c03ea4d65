// Names and keys from user files in error messages: quoted, and cut short
// (a hostile header can hold a name of many megabytes).
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// `text` for a message: whole UTF-8 characters, bytes that are not UTF-8
// and control characters as \xNN (\n, \t), at most about `maxBytes` of it
// and then "... (N bytes)".
std::string printableText(std::string_view text, size_t maxBytes);

// 'name' (printableText), or its first 200 bytes then "...' (N bytes)".
std::string quoteName(std::string_view name);

} // namespace kiln
