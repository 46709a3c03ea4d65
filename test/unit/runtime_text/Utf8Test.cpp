// UTF-8 checks and the stream that never splits a character, and the
// byte-level alphabet's round trip.
#include "runtime/text/Utf8.h"
#include "runtime/text/ByteLevel.h"

#include <gtest/gtest.h>

namespace kiln::text {
namespace {

TEST(Utf8Test, FindsTheFirstByteThatIsNotUtf8) {
  EXPECT_EQ(firstInvalidUtf8("plain ascii"), std::string::npos);
  EXPECT_EQ(firstInvalidUtf8("한국어 中文 🚀"), std::string::npos);
  EXPECT_EQ(firstInvalidUtf8("ok \xff"), 3u);
  EXPECT_EQ(firstInvalidUtf8("\xc0\xaf"), 0u);         // overlong '/'
  EXPECT_EQ(firstInvalidUtf8("a\xe0\x80\xaf"), 1u);    // overlong, three bytes
  EXPECT_EQ(firstInvalidUtf8("\xed\xa0\x80"), 0u);     // a surrogate
  EXPECT_EQ(firstInvalidUtf8("\xf4\x90\x80\x80"), 0u); // past U+10FFFF
  EXPECT_EQ(firstInvalidUtf8("ab\xe4\xb8"), 2u);       // cut short
  EXPECT_EQ(firstInvalidUtf8("\xe4\xb8\x41"), 0u);     // a bad continuation
  EXPECT_EQ(describeInvalidUtf8("ok \xff", 3), "byte 3 (0xff) is not UTF-8");
}

TEST(Utf8Test, AStreamWaitsForTheRestOfACharacter) {
  const std::string rocket = "\xf0\x9f\x9a\x80"; // U+1F680, four bytes
  Utf8Stream stream;
  EXPECT_EQ(stream.push("go "), "go ");
  EXPECT_EQ(stream.push(rocket.substr(0, 1)), "");
  EXPECT_EQ(stream.push(rocket.substr(1, 2)), "");
  EXPECT_EQ(stream.push(rocket.substr(3) + "!"), rocket + "!");
  EXPECT_EQ(stream.finish(), "");
  // Every split of a mixed text gives it back whole, in pieces that are
  // each UTF-8.
  const std::string text = "a한" + rocket + "é中";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8Stream split;
    const std::string first = split.push(text.substr(0, cut));
    const std::string second = split.push(text.substr(cut));
    EXPECT_EQ(firstInvalidUtf8(first), std::string::npos) << cut;
    EXPECT_EQ(firstInvalidUtf8(second), std::string::npos) << cut;
    EXPECT_EQ(first + second + split.finish(), text) << cut;
  }
}

TEST(Utf8Test, BytesNoTokenCanCompleteBecomeReplacementCharacters) {
  Utf8Stream stream;
  EXPECT_EQ(stream.push("a\xff"
                        "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(stream.push("\xe4\xb8"), "");
  EXPECT_EQ(stream.finish(), "\xef\xbf\xbd"); // a character cut by the end
}

TEST(ByteLevelTest, EveryByteHasItsOwnPrintableSymbol) {
  std::string all;
  for (int b = 0; b < 256; ++b)
    all += static_cast<char>(b);
  const std::string symbols = toByteLevel(all);
  EXPECT_EQ(firstInvalidUtf8(symbols), std::string::npos);
  EXPECT_EQ(fromByteLevel(symbols), all);
  EXPECT_EQ(byteSymbol(' '), "\xc4\xa0");  // U+0120, GPT-2's 'Ġ'
  EXPECT_EQ(byteSymbol('\n'), "\xc4\x8a"); // 'Ċ'
  EXPECT_EQ(byteSymbol('A'), "A");
  EXPECT_EQ(byteSymbol(0xe9), "\xc3\xa9"); // Latin-1 stands for itself
  // Outside the alphabet, a character is kept as it is.
  EXPECT_EQ(fromByteLevel("\xe4\xb8\xad"), "\xe4\xb8\xad");
}

} // namespace
} // namespace kiln::text
