// What error messages show of user bytes: whole UTF-8 characters, escapes for
// bytes that are not UTF-8 and for control characters, and a cut with the
// full size past about 200 bytes (never a split character).
#include "runtime/core/QuoteName.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(QuoteNameTest, ShowsOnlyPrintableUtf8) {
  EXPECT_EQ(quoteName("model.layers.0.w"), "'model.layers.0.w'");
  EXPECT_EQ(quoteName("한국어 🚀"), "'한국어 🚀'");
  EXPECT_EQ(quoteName("a\xff"
                      "b\xc0\xaf"
                      "c"),
            "'a\\xffb\\xc0\\xafc'");
  EXPECT_EQ(quoteName("line\nbreak\tand\x1b[31m"), "'line\\nbreak\\tand\\x1b[31m'");
  EXPECT_EQ(printableText("ok \xe4\xb8", 100), "ok \\xe4\\xb8");
}

TEST(QuoteNameTest, CutsLongNamesBetweenCharacters) {
  std::string name;
  for (int i = 0; i < 1000; ++i)
    name += "한"; // three bytes each
  const std::string quoted = quoteName(name);
  EXPECT_LT(quoted.size(), 260u);
  EXPECT_NE(quoted.find("...' (3000 bytes)"), std::string::npos);
  EXPECT_EQ(quoted.substr(1, 3), "한");
  const std::string text = printableText(std::string(100000, '6'), 240);
  EXPECT_EQ(text, std::string(240, '6') + "... (100000 bytes)");
}

} // namespace
} // namespace kiln
