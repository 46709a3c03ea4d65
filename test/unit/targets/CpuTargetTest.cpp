// kilnc --cpu: LLVM's CPU names and "host" resolved to the features the
// kernels may use, which the artifact records and the runtime checks.
#include "targets/x86/CpuTarget.h"
#include "runtime/cpu/CpuFeatures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace kiln::x86 {
namespace {

CpuTarget resolved(const std::string &name) {
  std::string error;
  std::optional<CpuTarget> cpu = resolveCpu(name, error);
  EXPECT_TRUE(cpu) << error;
  return cpu.value_or(CpuTarget{});
}

TEST(CpuTarget, NamedCpusHaveTheirFeaturesAndNothingTheRuntimeCannotCheck) {
  const std::vector<std::string> known = knownCpuFeatures();
  for (const char *name :
       {"sapphirerapids", "graniterapids", "znver4", "znver5", "x86-64-v4", "x86-64-v3"}) {
    CpuTarget cpu = resolved(name);
    EXPECT_EQ(cpu.cpu, name);
    EXPECT_TRUE(std::is_sorted(cpu.features.begin(), cpu.features.end())) << name;
    for (const std::string &feature : cpu.features)
      EXPECT_NE(std::find(known.begin(), known.end(), feature), known.end())
          << name << " lists " << feature;
    // Implied features are included: every one of these CPUs has AVX2.
    EXPECT_TRUE(cpu.has("avx2") && cpu.has("avx") && cpu.has("fma")) << name;
  }
  EXPECT_TRUE(resolved("sapphirerapids").has("amx-bf16"));
  EXPECT_TRUE(resolved("graniterapids").has("amx-tile"));
  EXPECT_TRUE(resolved("znver4").has("avx512bf16"));
  EXPECT_FALSE(resolved("znver5").has("amx-tile"));
  EXPECT_TRUE(resolved("x86-64-v4").has("avx512f"));
  EXPECT_FALSE(resolved("x86-64-v4").has("avx512bf16"));
  EXPECT_FALSE(resolved("x86-64-v3").has("avx512f"));
  EXPECT_EQ(resolved("x86-64-v3").vectorBits(), 256);
  EXPECT_EQ(resolved("znver4").vectorBits(), 512);
  // The same name, the same answer (deterministic artifacts).
  EXPECT_EQ(resolved("znver4").features, resolved("znver4").features);
}

TEST(CpuTarget, HostIsThisMachinesCpuWithFeaturesItHas) {
  CpuTarget host = resolved("host");
  EXPECT_FALSE(host.cpu.empty());
  EXPECT_NE(host.cpu, "host");
  EXPECT_TRUE(host.has("sse2"));
  for (const std::string &feature : host.features)
    EXPECT_TRUE(cpuHasFeature(feature).value_or(false)) << feature;
}

TEST(CpuTarget, UnknownNamesAreRefusedWithTheChoices) {
  std::string error;
  EXPECT_FALSE(resolveCpu("pentium-9000", error));
  EXPECT_NE(error.find("unknown x86-64 CPU 'pentium-9000' for --cpu"), std::string::npos) << error;
  EXPECT_NE(error.find("--cpu=help"), std::string::npos) << error;
  EXPECT_FALSE(resolveCpu("i386", error)) << "a 32-bit CPU";
  const std::vector<std::string> names = knownCpuNames();
  for (const char *name : {"sapphirerapids", "graniterapids", "znver4", "znver5", "x86-64-v4"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
}

// The runtime's table of x86-64 levels (what it suggests for --cpu when an
// artifact asks too much) is LLVM's, as far as the runtime checks features.
TEST(CpuTarget, TheRuntimesLevelsAreLlvmsLevels) {
  const CpuTarget base = resolved("x86-64");
  for (const char *level : {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"}) {
    std::optional<std::vector<std::string>> adds = x86LevelFeatures(level);
    ASSERT_TRUE(adds) << level;
    std::set<std::string> expected(base.features.begin(), base.features.end());
    expected.insert(adds->begin(), adds->end());
    const CpuTarget cpu = resolved(level);
    EXPECT_EQ(expected, std::set<std::string>(cpu.features.begin(), cpu.features.end())) << level;
  }
  EXPECT_FALSE(x86LevelFeatures("znver4"));
  const std::string here = hostX86Level();
  for (const std::string &feature : resolved(here).features)
    EXPECT_TRUE(cpuHasFeature(feature).value_or(false)) << here << " needs " << feature;
}

} // namespace
} // namespace kiln::x86
