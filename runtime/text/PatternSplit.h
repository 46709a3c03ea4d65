// A pre-tokenizer's split of text by a regular expression (Hugging Face's
// Split with behavior "Isolated"): every match is a piece, and so is every
// run of text between matches. The pattern is compiled by PCRE2 for UTF-8
// with Unicode properties (\p{L}, \s as Unicode whitespace), close to the
// Oniguruma syntax tokenizer.json patterns are written for; PCRE2's JIT
// runs it where the machine has one.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

class PatternSplit {
public:
  // Throws std::runtime_error "<where>: the pattern does not compile at
  // offset N: <PCRE2's reason>".
  PatternSplit(const std::string &pattern, const std::string &where);
  ~PatternSplit();
  PatternSplit(PatternSplit &&) noexcept;
  PatternSplit &operator=(PatternSplit &&) noexcept;

  // The pieces of `text` (valid UTF-8), in order; together they are `text`.
  std::vector<std::string_view> split(std::string_view text) const;

private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string where_;
};

} // namespace kiln::text
