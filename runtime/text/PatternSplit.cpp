#include "runtime/text/PatternSplit.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

namespace kiln::text {

struct PatternSplit::Compiled {
  pcre2_code *code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string pcreMessage(int code) {
  PCRE2_UCHAR text[256];
  pcre2_get_error_message(code, text, sizeof text);
  return reinterpret_cast<const char *>(text);
}

// Frees match data as it goes.
struct MatchData {
  pcre2_match_data *data;
  explicit MatchData(const pcre2_code *code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};

} // namespace

PatternSplit::PatternSplit(const std::string &pattern, const std::string &where)
    : compiled_(std::make_unique<Compiled>()), where_(where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!compiled_->code)
    throw std::runtime_error(where + ": the pattern does not compile at offset " +
                             std::to_string(offset) + ": " + pcreMessage(error));
  // Without a JIT (or where it is refused) the interpreter matches the same.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

PatternSplit::~PatternSplit() = default;
PatternSplit::PatternSplit(PatternSplit &&) noexcept = default;
PatternSplit &PatternSplit::operator=(PatternSplit &&) noexcept = default;

std::vector<std::string_view> PatternSplit::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  MatchData match(compiled_->code);
  if (!match.data)
    throw std::runtime_error(where_ + ": out of memory for a match");
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0, gap = 0;
  while (start <= text.size()) {
    const int found = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                                  match.data, nullptr);
    if (found == PCRE2_ERROR_NOMATCH)
      break;
    if (found < 0)
      throw std::runtime_error(where_ + ": matching the pattern: " + pcreMessage(found));
    const PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(match.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > gap)
      pieces.push_back(text.substr(gap, begin - gap));
    gap = end;
    if (end > begin) {
      pieces.push_back(text.substr(begin, end - begin));
      start = end;
      continue;
    }
    // An empty match cuts the text there (as Hugging Face's splits do); step
    // over one character and look again.
    if (begin >= text.size())
      break;
    start = begin + 1;
    while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80)
      ++start;
  }
  if (gap < text.size())
    pieces.push_back(text.substr(gap));
  return pieces;
}

} // namespace kiln::text
