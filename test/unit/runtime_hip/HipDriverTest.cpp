// An amdgcn artifact on a machine without an AMD GPU: one clear line, whether
// libamdhip64 is missing or present without a device (Debian's
// libamdhip64-dev installs the runtime; its hipInit then fails); and the
// amdgcn rules are checked before any runtime is looked for.
#include "runtime/hip/HipDriver.h"
#include "runtime/engine/Engine.h"
#include "runtime/hip/HipDriverTable.h"
#include "runtime/tools/kiln-run/KilnRun.h"

#include "test/unit/runtime_hip/AmdgcnTestArtifact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

using namespace kiln::hip_test;

bool haveAmdGpu() {
  try {
    hip::HipDriver::system();
    return true;
  } catch (const hip::HipUnavailable &) {
    return false;
  }
}

TEST(HipDriverTest, NoGpuIsOneClearLine) {
  if (haveAmdGpu())
    GTEST_SKIP() << "this machine has an AMD GPU";
  EngineOptions options;
  options.weights = "synthetic:5";
  const std::string message = errorOf([&] { Engine::create(amdgcnArtifact(), options); });
  RecordProperty("message", message);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  const bool noRuntime = message == "gpu.kiln: no HIP runtime (libamdhip64.so): this artifact "
                                    "is for amdgcn gfx950";
  // With a runtime but no device: the device is what is named missing.
  const std::string tail = "): this artifact is for amdgcn gfx950";
  const bool noDevice = message.rfind("gpu.kiln: no AMD GPU (libamdhip64.so", 0) == 0 &&
                        message.size() > tail.size() &&
                        message.compare(message.size() - tail.size(), tail.size(), tail) == 0;
  EXPECT_TRUE(noRuntime || noDevice) << message;
  // The same on the second try: the runtime is looked for once per process.
  EXPECT_EQ(errorOf([&] { Engine::create(amdgcnArtifact(), options); }), message);
}

TEST(HipDriverTest, DebiansRuntimeWithoutADeviceNamesTheDevice) {
  // Where libamdhip64.so is installed but there is no GPU, hipInit fails
  // (HIP 5.2: hipErrorInvalidDevice) or finds no device.
  if (haveAmdGpu())
    GTEST_SKIP() << "this machine has an AMD GPU";
  const std::string message = errorOf([] { hip::HipDriver::load(hip::HipDriver::kLibrary); });
  if (message == "no HIP runtime (libamdhip64.so)")
    GTEST_SKIP() << "no libamdhip64.so here";
  EXPECT_EQ(message.rfind("no AMD GPU (libamdhip64.so: hip", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(HipDriverTest, KilnRunReportsNoGpuOnOneLine) {
  if (haveAmdGpu())
    GTEST_SKIP() << "this machine has an AMD GPU";
  std::string dir = ::testing::TempDir() + "/kiln-hip-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::vector<uint8_t> bytes = serializeGpu(amdgcnTestArtifact(), nvptxTestShapes());
  std::ofstream(dir + "/gpu.kiln", std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  std::ostringstream out, err;
  const int status = kilnRunMain({dir + "/gpu.kiln", "--weights", "synthetic:5", "--prompt-ids",
                                  "1,2,3", "--max-new-tokens", "2", "--device", "0"},
                                 out, err, false);
  const std::string text = err.str();
  EXPECT_EQ(status, 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_HAS(text, "kiln-run: error: " + dir + "/gpu.kiln: no ");
  EXPECT_HAS(text, "this artifact is for amdgcn gfx950");
  std::filesystem::remove_all(dir);
}

TEST(HipDriverTest, AMissingLibraryIsNamed) {
  EXPECT_EQ(errorOf([] { hip::HipDriver::load("libkiln-no-such-hip.so"); }),
            "no HIP runtime (libkiln-no-such-hip.so)");
  EXPECT_EQ(errorOf([] { createHipBackend(amdgcnArtifact(), 0, "libkiln-no-such-hip.so"); }),
            "gpu.kiln: no HIP runtime (libkiln-no-such-hip.so): this "
            "artifact is for amdgcn gfx950");
}

TEST(HipDriverTest, ALibraryThatIsNotHipIsNamed) {
  // libm is a shared library without HIP's entry points.
  EXPECT_EQ(errorOf([] { hip::HipDriver::load("libm.so.6"); }),
            "the HIP runtime (libm.so.6) lacks hipInit (this runtime needs "
            "HIP 5.2 or newer)");
}

TEST(HipDriverTest, RulesComeBeforeTheRuntime) {
  TestArtifact a = amdgcnTestArtifact();
  std::get<TestLaunch>(a.entryPoints[0].steps[0]).scalars.push_back({fb::ScalarKind::Parts, 0});
  EXPECT_HAS(errorOf([&] { createHipBackend(amdgcnArtifact(a), 0, "libkiln-no-such-hip.so"); }),
             "takes a Parts scalar");
}

TEST(HipDriverTest, ErrorNamesWithoutARuntime) {
  EXPECT_EQ(hip::knownHipErrorName(100), "hipErrorNoDevice");
  EXPECT_EQ(hip::knownHipErrorName(101), "hipErrorInvalidDevice");
  EXPECT_EQ(hip::knownHipErrorName(209), "hipErrorNoBinaryForGpu");
  EXPECT_EQ(hip::knownHipErrorName(719), "hipErrorLaunchFailure");
  EXPECT_EQ(hip::knownHipErrorName(12345), "HIP error 12345");
}

TEST(HipDriverTest, ArchitectureOfAGcnArchName) {
  EXPECT_EQ(hip::archOf("gfx942:sramecc+:xnack-"), "gfx942");
  EXPECT_EQ(hip::archOf("gfx950"), "gfx950");
  EXPECT_EQ(hip::archOf(""), "");
}

} // namespace
} // namespace kiln
