#include "targets/common/KernelSpec.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::kernels {

std::string fillTemplate(const std::string &text,
                         const std::map<std::string, std::string> &values) {
  std::string out;
  out.reserve(text.size() * 2);
  size_t at = 0;
  while (true) {
    size_t open = text.find("@@", at);
    if (open == std::string::npos)
      break;
    // "@@@name@@" is a literal '@' (an MLIR symbol) before a placeholder.
    while (open + 2 < text.size() && text[open + 2] == '@')
      ++open;
    size_t close = text.find("@@", open + 2);
    if (close == std::string::npos)
      break;
    out.append(text, at, open - at);
    std::string key = text.substr(open + 2, close - open - 2);
    auto it = values.find(key);
    if (it == values.end()) {
      std::fprintf(stderr, "kiln: kernel template has no value for @@%s@@\n", key.c_str());
      std::abort();
    }
    out += it->second;
    at = close + 2;
  }
  out.append(text, at, std::string::npos);
  return out;
}

} // namespace kiln::kernels
