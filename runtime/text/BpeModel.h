// A byte-level BPE model (tokenizer.json's "model" of type "BPE"): the
// vocabulary, and merges ranked by their order. A word (one pre-token, as
// byte-level symbols) starts as one token a symbol; the adjacent pair of
// lowest rank is merged, leftmost first, until no pair has a rank. With
// ignore_merges a word that is itself in the vocabulary is that token.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::text {

class BpeModel {
public:
  using Merge = std::pair<std::string, std::string>;

  // Throws std::runtime_error "<where>: ..." naming the field: a merge whose
  // halves or result are not in the vocabulary, an id given twice.
  BpeModel(const std::vector<std::pair<std::string, int32_t>> &vocab,
           const std::vector<Merge> &merges, bool ignoreMerges, const std::string &where);

  // Appends the tokens of `symbols` (byte-level) to `out`. Throws
  // std::runtime_error for a symbol the vocabulary lacks (no unk token).
  void encodeWord(std::string_view symbols, std::vector<int32_t> &out) const;

  std::optional<int32_t> id(std::string_view token) const;
  // The token of `id`, or null where the vocabulary has none.
  const std::string *token(int32_t id) const;
  // One past the largest id.
  int32_t idLimit() const { return static_cast<int32_t>(tokens_.size()); }

private:
  std::vector<int32_t> merge(std::string_view symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  // (left << 32 | right) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool ignoreMerges_;
  std::string where_;
  // Words seen before (text repeats words), bounded.
  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

} // namespace kiln::text
