#include "runtime/text/Utf8.h"

namespace kiln::text {

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t at = 0;
  while (at < pending_.size()) {
    bool truncated = false;
    const size_t length = utf8SequenceAt(pending_, at, &truncated);
    if (truncated)
      break; // the rest comes with the next token
    if (length == 0) {
      appendUtf8(out, 0xfffd); // a byte no token sequence can complete
      ++at;
      continue;
    }
    out.append(pending_, at, length);
    at += length;
  }
  pending_.erase(0, at);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out;
  if (!pending_.empty())
    appendUtf8(out, 0xfffd);
  pending_.clear();
  return out;
}

} // namespace kiln::text
