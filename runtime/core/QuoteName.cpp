#include "runtime/core/QuoteName.h"

namespace kiln {

std::string quoteName(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  if (name.size() <= kMaxShown)
    return "'" + std::string(name) + "'";
  return "'" + std::string(name.substr(0, kMaxShown)) + "...' (" + std::to_string(name.size()) +
         " bytes)";
}

} // namespace kiln
