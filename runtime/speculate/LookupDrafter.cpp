#include "runtime/speculate/LookupDrafter.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kiln::speculate {

LookupDrafter::LookupDrafter(LookupOptions options) : options_(options) {
  if (options.minNgram < 1 || options.minNgram > options.maxNgram || options.maxNgram > 64 ||
      options.maxDraft < 1 || options.maxDraft > 256)
    throw std::invalid_argument(
        "lookup drafting takes 1 <= min n-gram <= max n-gram <= 64 and 1 <= draft <= 256 (got " +
        std::to_string(options.minNgram) + ", " + std::to_string(options.maxNgram) + ", " +
        std::to_string(options.maxDraft) + ")");
  index_.resize(static_cast<size_t>(options.maxNgram) + 1);
}

uint64_t LookupDrafter::key(size_t end, int n) const {
  // FNV-1a over the n tokens' bytes.
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = end - static_cast<size_t>(n); i < end; ++i) {
    auto value = static_cast<uint32_t>(tokens_[i]);
    for (int byte = 0; byte < 4; ++byte, value >>= 8) {
      hash ^= value & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

void LookupDrafter::append(int32_t token) {
  tokens_.push_back(token);
  const size_t end = tokens_.size();
  // The n-grams ending one token earlier are now followed by `token`:
  // index them by the position past them. (Those ending at `end` have no
  // continuation yet; they are what draft() looks up.)
  for (int n = options_.minNgram; n <= options_.maxNgram; ++n)
    if (end - 1 >= static_cast<size_t>(n))
      index_[static_cast<size_t>(n)][key(end - 1, n)].push_back(static_cast<uint32_t>(end - 1));
}

void LookupDrafter::append(const std::vector<int32_t> &tokens) {
  for (int32_t token : tokens)
    append(token);
}

void LookupDrafter::reset() {
  tokens_.clear();
  for (auto &byLength : index_)
    byLength.clear();
}

std::vector<int32_t> LookupDrafter::draft() const {
  const size_t end = tokens_.size();
  for (int n = std::min<int>(options_.maxNgram, static_cast<int>(end)); n >= options_.minNgram;
       --n) {
    const auto &byHash = index_[static_cast<size_t>(n)];
    const auto found = byHash.find(key(end, n));
    if (found == byHash.end())
      continue;
    // The latest earlier occurrence whose tokens really match.
    for (auto next = found->second.rbegin(); next != found->second.rend(); ++next) {
      const size_t after = *next;
      if (!std::equal(tokens_.begin() + static_cast<std::ptrdiff_t>(after) - n,
                      tokens_.begin() + static_cast<std::ptrdiff_t>(after), tokens_.end() - n))
        continue;
      const size_t stop = std::min(end, after + static_cast<size_t>(options_.maxDraft));
      return std::vector<int32_t>(tokens_.begin() + static_cast<std::ptrdiff_t>(after),
                                  tokens_.begin() + static_cast<std::ptrdiff_t>(stop));
    }
  }
  return {};
}

std::vector<int32_t> LookupDrafter::draft(int64_t maxTokens) {
  std::vector<int32_t> tokens = draft();
  if (static_cast<int64_t>(tokens.size()) > maxTokens)
    tokens.resize(static_cast<size_t>(std::max<int64_t>(0, maxTokens)));
  return tokens;
}

} // namespace kiln::speculate
