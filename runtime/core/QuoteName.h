// Names and keys from user files in error messages: quoted, and cut short
// (a hostile header can hold a name of many megabytes).
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// 'name', or its first 200 bytes then "...' (N bytes)".
std::string quoteName(std::string_view name);

} // namespace kiln
