// KernelLibrary: a shared object compiled at test time is loaded from bytes
// and its kernels called; missing symbols and damaged blobs are clear errors.
// Also the CPU feature queries and the AMX permission.
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/RuntimeError.h"

#include "test/unit/runtime_cpu/CompileC.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>
#include <utility>

namespace kiln {
namespace {

using runtime_test::compileSharedObject;
using runtime_test::haveTestCompiler;

constexpr const char *kAddSource = R"c(
#include <stdint.h>
/* args: three pointers to int64_t: a, b and the result. */
void kiln_add(void **args) {
  *(int64_t *)args[2] = *(int64_t *)args[0] + *(int64_t *)args[1];
}
void kiln_mul(void **args) {
  *(int64_t *)args[2] = *(int64_t *)args[0] * *(int64_t *)args[1];
}
)c";

template <typename Fn> std::string runtimeErrorOf(Fn &&fn) {
  try {
    fn();
  } catch (const RuntimeError &error) {
    return error.what();
  }
  ADD_FAILURE() << "expected RuntimeError";
  return "";
}

class KernelLibraryTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveTestCompiler())
      GTEST_SKIP() << "no C compiler to build test kernels";
    blob_ = compileSharedObject(kAddSource);
    ASSERT_FALSE(blob_.empty());
  }
  std::vector<uint8_t> blob_;
};

TEST_F(KernelLibraryTest, LoadsFromBytesAndCalls) {
  KernelLibrary library = KernelLibrary::load(blob_.data(), blob_.size(), "test.kiln");
  KernelFn add = library.resolve("kiln_add");
  int64_t a = 40, b = 2, result = 0;
  void *args[] = {&a, &b, &result};
  add(args);
  EXPECT_EQ(result, 42);
  library.resolve("kiln_mul")(args);
  EXPECT_EQ(result, 80);
}

TEST_F(KernelLibraryTest, MissingSymbolNamesIt) {
  KernelLibrary library = KernelLibrary::load(blob_.data(), blob_.size(), "test.kiln");
  EXPECT_EQ(library.find("kiln_sub"), nullptr);
  const std::string message = runtimeErrorOf([&] { library.resolve("kiln_sub"); });
  EXPECT_NE(message.find("'kiln_sub'"), std::string::npos) << message;
  EXPECT_NE(message.find("test.kiln"), std::string::npos) << message;
}

TEST_F(KernelLibraryTest, LibcSymbolsAreNotKernels) {
  KernelLibrary library = KernelLibrary::load(blob_.data(), blob_.size(), "test.kiln");
  EXPECT_EQ(library.find("malloc"), nullptr);
}

// Two copies loaded at once are two libraries; so is a reload after the
// first was closed (the /proc/self/fd path may be reused).
TEST_F(KernelLibraryTest, IndependentLoads) {
  std::vector<uint8_t> other = compileSharedObject(R"c(
#include <stdint.h>
void kiln_add(void **args) { *(int64_t *)args[2] = -1; }
)c");
  ASSERT_FALSE(other.empty());
  int64_t a = 1, b = 2, result = 0;
  void *args[] = {&a, &b, &result};
  {
    KernelLibrary first = KernelLibrary::load(blob_.data(), blob_.size(), "a");
    KernelLibrary second = KernelLibrary::load(other.data(), other.size(), "b");
    first.resolve("kiln_add")(args);
    EXPECT_EQ(result, 3);
    second.resolve("kiln_add")(args);
    EXPECT_EQ(result, -1);
  }
  KernelLibrary third = KernelLibrary::load(blob_.data(), blob_.size(), "c");
  third.resolve("kiln_add")(args);
  EXPECT_EQ(result, 3);
  KernelLibrary fourth = KernelLibrary::load(other.data(), other.size(), "d");
  fourth.resolve("kiln_add")(args);
  EXPECT_EQ(result, -1);
}

TEST_F(KernelLibraryTest, MoveKeepsTheLibrary) {
  KernelLibrary library = KernelLibrary::load(blob_.data(), blob_.size(), "test.kiln");
  KernelLibrary moved = std::move(library);
  EXPECT_NE(moved.resolve("kiln_add"), nullptr);
  EXPECT_EQ(moved.source(), "test.kiln");
}

TEST_F(KernelLibraryTest, TruncatedBlobIsRefused) {
  const std::string message =
      runtimeErrorOf([&] { KernelLibrary::load(blob_.data(), blob_.size() / 3, "cut.kiln"); });
  EXPECT_NE(message.find("cut.kiln"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST(KernelLibrary, GarbageIsRefused) {
  const std::vector<uint8_t> garbage(4096, 0xAB);
  const std::string message =
      runtimeErrorOf([&] { KernelLibrary::load(garbage.data(), garbage.size(), "junk.kiln"); });
  EXPECT_NE(message.find("junk.kiln"), std::string::npos) << message;
  EXPECT_NE(message.find("not an ELF"), std::string::npos) << message;
  EXPECT_NE(runtimeErrorOf([] { KernelLibrary::load(nullptr, 0, "empty"); }).find("not an ELF"),
            std::string::npos);
}

TEST(KernelLibrary, WrongElfKindIsRefused) {
  // An ELF header for a 32-bit file.
  std::vector<uint8_t> header(64, 0);
  std::memcpy(header.data(),
              "\x7f"
              "ELF",
              4);
  header[4] = 1; // ELFCLASS32
  header[5] = 1;
  EXPECT_NE(runtimeErrorOf([&] {
              KernelLibrary::load(header.data(), header.size(), "x");
            }).find("64-bit"),
            std::string::npos);
}

TEST(CpuFeatures, KnownAndUnknownNames) {
  EXPECT_TRUE(cpuHasFeature("sse2").value_or(false)); // every x86-64 CPU
  EXPECT_TRUE(cpuHasFeature("+sse2").value_or(false));
  EXPECT_FALSE(cpuHasFeature("warp-drive").has_value());
  EXPECT_EQ(cpuHasFeature("amx-bf16").has_value(), true);
  for (const std::string &name : knownCpuFeatures())
    EXPECT_TRUE(cpuHasFeature(name).has_value()) << name;
}

TEST(CpuFeatures, AmxAgreesWithFeatureBits) {
  const bool tile = *cpuHasFeature("amx-tile");
  const bool bf16 = *cpuHasFeature("amx-bf16");
  // cpuHasAmx reads cpuid only; the feature query also needs OS state.
  if (tile && bf16) {
    EXPECT_TRUE(cpuHasAmx());
  }
  if (!cpuHasAmx()) {
    EXPECT_FALSE(tile && bf16);
  }
}

TEST(CpuFeatures, NeedsAmx) {
  EXPECT_TRUE(needsAmx({"avx512bf16", "amx-bf16"}));
  EXPECT_TRUE(needsAmx({"+amx-tile"}));
  EXPECT_FALSE(needsAmx({"avx512bf16", "avx2"}));
  EXPECT_FALSE(needsAmx({}));
}

// The x86-64 levels the runtime suggests for kilnc --cpu: each includes the
// one before, and this CPU runs the one it names.
TEST(CpuFeatures, X86Levels) {
  const std::vector<std::string> v3 = *x86LevelFeatures("x86-64-v3");
  const std::vector<std::string> v4 = *x86LevelFeatures("x86-64-v4");
  EXPECT_TRUE(x86LevelFeatures("x86-64")->empty());
  EXPECT_FALSE(x86LevelFeatures("znver4").has_value());
  for (const std::string &feature : v3)
    EXPECT_NE(std::find(v4.begin(), v4.end(), feature), v4.end()) << feature;
  EXPECT_NE(std::find(v4.begin(), v4.end(), "avx512f"), v4.end());
  const std::vector<std::string> here = x86LevelFeatures(hostX86Level()).value();
  for (const std::string &feature : here)
    EXPECT_TRUE(cpuHasFeature(feature).value_or(false)) << hostX86Level() << ": " << feature;
}

// Where the CPU has AMX, the permission is granted and a tile configuration
// load and a tile zero work (without it the process would get SIGILL);
// elsewhere the request fails with a message that says why.
TEST(CpuFeatures, RequestAmxMatchesCpu) {
  if (!cpuHasAmx()) {
    const std::string message = runtimeErrorOf([] { requestAmx(); });
    EXPECT_NE(message.find("AMX"), std::string::npos) << message;
    return;
  }
  EXPECT_NO_THROW(requestAmx());
  EXPECT_NO_THROW(requestAmx()); // once per process, then remembered
  if (!haveTestCompiler())
    return;
  std::vector<uint8_t> blob = compileSharedObject(R"c(
#include <stdint.h>
#include <string.h>
void kiln_tile_zero(void **args) {
  unsigned char config[64];
  memset(config, 0, sizeof config);
  config[0] = 1;                       /* palette 1 */
  config[16] = 64;                     /* tile 0: 64 bytes a row */
  config[48] = 16;                     /* tile 0: 16 rows */
  float *out = (float *)args[0];
  __asm__ volatile("ldtilecfg %0" :: "m"(config));
  __asm__ volatile("tilezero %%tmm0" ::: "memory");
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" :: "r"(out), "r"((long)64) : "memory");
  __asm__ volatile("tilerelease" ::: "memory");
}
)c");
  ASSERT_FALSE(blob.empty());
  KernelLibrary library = KernelLibrary::load(blob.data(), blob.size(), "amx");
  std::vector<float> out(256, 1.0f);
  void *args[] = {out.data()};
  library.resolve("kiln_tile_zero")(args);
  for (float value : out)
    ASSERT_EQ(value, 0.0f);
}

} // namespace
} // namespace kiln
