#include "runtime/text/BpeModel.h"

#include "runtime/core/QuoteName.h"
#include "runtime/core/Utf8.h"

#include <limits>
#include <stdexcept>

namespace kiln::text {
namespace {

// Words cached at most; a cache that fills is emptied.
constexpr size_t kCacheWords = 1 << 16;

uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

} // namespace

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>> &vocab,
                   const std::vector<Merge> &merges, bool ignoreMerges, const std::string &where)
    : ignoreMerges_(ignoreMerges), where_(where) {
  for (const auto &[token, id] : vocab) {
    if (id < 0)
      throw std::runtime_error(where + ": model.vocab[" + quoteName(token) + "] is " +
                               std::to_string(id) + ", expected an id of 0 or more");
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(static_cast<size_t>(id) + 1);
      present_.resize(static_cast<size_t>(id) + 1);
    }
    if (present_[id])
      throw std::runtime_error(where + ": model.vocab gives id " + std::to_string(id) +
                               " to both " + quoteName(tokens_[id]) + " and " + quoteName(token));
    tokens_[id] = token;
    present_[id] = true;
    vocab_.emplace(token, id);
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto &[left, right] = merges[rank];
    const std::string field = where + ": model.merges[" + std::to_string(rank) + "] (" +
                              quoteName(left) + ", " + quoteName(right) + ")";
    const auto a = vocab_.find(left), b = vocab_.find(right), c = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || c == vocab_.end())
      throw std::runtime_error(field + ": " +
                               quoteName(a == vocab_.end()   ? left
                                         : b == vocab_.end() ? right
                                                             : left + right) +
                               " is not in model.vocab");
    // The first of a pair given twice keeps its rank.
    merges_.emplace(pairKey(a->second, b->second),
                    std::make_pair(static_cast<int32_t>(rank), c->second));
  }
}

std::optional<int32_t> BpeModel::id(std::string_view token) const {
  const auto found = vocab_.find(std::string(token));
  if (found == vocab_.end())
    return std::nullopt;
  return found->second;
}

const std::string *BpeModel::token(int32_t id) const {
  if (id < 0 || id >= idLimit() || !present_[id])
    return nullptr;
  return &tokens_[id];
}

std::vector<int32_t> BpeModel::merge(std::string_view symbols) const {
  std::vector<int32_t> word;
  for (size_t at = 0; at < symbols.size();) {
    const size_t length =
        std::min(utf8LengthOf(static_cast<uint8_t>(symbols[at])), symbols.size() - at);
    const auto found = vocab_.find(std::string(symbols.substr(at, length)));
    if (found == vocab_.end())
      throw std::runtime_error(where_ + ": the symbol " + quoteName(symbols.substr(at, length)) +
                               " is not in model.vocab (and the model has no unk_token)");
    word.push_back(found->second);
    at += length;
  }
  for (;;) {
    int32_t bestRank = std::numeric_limits<int32_t>::max(), merged = -1;
    size_t bestAt = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto found = merges_.find(pairKey(word[i], word[i + 1]));
      if (found != merges_.end() && found->second.first < bestRank) {
        bestRank = found->second.first;
        merged = found->second.second;
        bestAt = i;
      }
    }
    if (merged < 0)
      return word;
    word[bestAt] = merged;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(bestAt) + 1);
  }
}

void BpeModel::encodeWord(std::string_view symbols, std::vector<int32_t> &out) const {
  if (symbols.empty())
    return;
  if (ignoreMerges_)
    if (const auto whole = vocab_.find(std::string(symbols)); whole != vocab_.end()) {
      out.push_back(whole->second);
      return;
    }
  const std::string key(symbols);
  {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    const auto found = cache_.find(key);
    if (found != cache_.end()) {
      out.insert(out.end(), found->second.begin(), found->second.end());
      return;
    }
  }
  std::vector<int32_t> word = merge(symbols);
  out.insert(out.end(), word.begin(), word.end());
  std::lock_guard<std::mutex> lock(cacheMutex_);
  if (cache_.size() >= kCacheWords)
    cache_.clear();
  cache_.emplace(key, std::move(word));
}

} // namespace kiln::text
