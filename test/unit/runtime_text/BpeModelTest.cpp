// The BPE model on a vocabulary small enough to follow by hand: merges by
// rank, leftmost first, ignore_merges, and the errors that name the field.
#include "runtime/text/BpeModel.h"
#include "runtime/text/PatternSplit.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace kiln::text {
namespace {

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &error) {
    return error.what();
  }
  return "(no error)";
}

const std::vector<std::pair<std::string, int32_t>> kVocab = {
    {"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}, {"aaa", 7}};

std::vector<int32_t> encode(const BpeModel &model, const std::string &word) {
  std::vector<int32_t> ids;
  model.encodeWord(word, ids);
  return ids;
}

TEST(BpeModelTest, MergesThePairOfLowestRankLeftmostFirst) {
  // bc before ab: "abc" becomes a + bc, and no (a, bc) merge exists.
  const BpeModel bcFirst(kVocab, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}, false, "t");
  EXPECT_EQ(encode(bcFirst, "abc"), (std::vector<int32_t>{0, 4}));
  // ab before bc: ab + c, then (ab, c) -> abc.
  const BpeModel abFirst(kVocab, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, false, "t");
  EXPECT_EQ(encode(abFirst, "abc"), (std::vector<int32_t>{5}));
  // Equal pairs: the leftmost merges first, so "aaa" is aa + a.
  const BpeModel pairs(kVocab, {{"a", "a"}}, false, "t");
  EXPECT_EQ(encode(pairs, "aaa"), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(encode(pairs, "aaaa"), (std::vector<int32_t>{6, 6}));
  // A word seen before (from the cache) gives the same.
  EXPECT_EQ(encode(abFirst, "abc"), (std::vector<int32_t>{5}));
}

TEST(BpeModelTest, IgnoreMergesTakesAWholeWordInTheVocabulary) {
  const BpeModel merging(kVocab, {{"a", "a"}}, false, "t");
  const BpeModel whole(kVocab, {{"a", "a"}}, true, "t");
  EXPECT_EQ(encode(merging, "aaa"), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(encode(whole, "aaa"), (std::vector<int32_t>{7}));
  EXPECT_EQ(encode(whole, "aaaa"), (std::vector<int32_t>{6, 6}));
}

TEST(BpeModelTest, RefusesWhatTheVocabularyLacks) {
  EXPECT_EQ(errorOf([] {
              BpeModel(kVocab, {{"a", "c"}}, false, "tok.json");
            }),
            "tok.json: model.merges[0] ('a', 'c'): 'ac' is not in model.vocab");
  EXPECT_EQ(errorOf([] {
              BpeModel(kVocab, {{"a", "b"}, {"x", "b"}}, false, "tok.json");
            }),
            "tok.json: model.merges[1] ('x', 'b'): 'x' is not in model.vocab");
  EXPECT_EQ(errorOf([] {
              BpeModel({{"a", 0}, {"b", 0}}, {}, false, "tok.json");
            }),
            "tok.json: model.vocab gives id 0 to both 'a' and 'b'");
  const BpeModel model(kVocab, {}, false, "tok.json");
  EXPECT_EQ(errorOf([&] { encode(model, "abz"); }),
            "tok.json: the symbol 'z' is not in model.vocab (and the model has no unk_token)");
  EXPECT_EQ(model.token(4) ? *model.token(4) : "", "bc");
  EXPECT_EQ(model.token(99), nullptr);
}

TEST(PatternSplitTest, MatchesAndTheGapsBetweenThemArePieces) {
  const PatternSplit words(R"(\p{L}+)", "t");
  const std::vector<std::string_view> pieces = words.split("한국 go, 中文!");
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"한국", " ", "go", ", ", "中文", "!"}));
  const PatternSplit lookahead(R"(\s+(?!\S)|\s+)", "t");
  EXPECT_EQ(lookahead.split("a   b"), (std::vector<std::string_view>{"a", "  ", " ", "b"}));
  EXPECT_EQ(PatternSplit("x*", "t").split("ab"), (std::vector<std::string_view>{"a", "b"}));
  EXPECT_EQ(errorOf([] { PatternSplit("(a", "tok.json: pattern"); }),
            "tok.json: pattern: the pattern does not compile at offset 2: missing closing "
            "parenthesis");
}

} // namespace
} // namespace kiln::text
