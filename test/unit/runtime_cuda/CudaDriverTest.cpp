// An nvptx artifact on a machine without a usable CUDA driver: one clear line,
// whether libcuda.so.1 is missing or the toolkit's stub stands in for it; and
// the nvptx rules are checked before any driver is looked for.
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaDriverTable.h"
#include "runtime/engine/Engine.h"
#include "runtime/tools/kiln-run/KilnRun.h"

#include "test/unit/runtime_cuda/NvptxTestArtifact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

using namespace kiln::cuda_test;

Artifact gpuArtifact(const TestArtifact &a = nvptxTestArtifact()) {
  return Artifact::fromBytes(serializeGpu(a, nvptxTestShapes()), "gpu.kiln");
}

bool haveCudaDriver() {
  try {
    cuda::CudaDriver::system();
    return true;
  } catch (const cuda::CudaUnavailable &) {
    return false;
  }
}

const char *stubLibrary() {
#ifdef KILN_CUDA_STUB
  return KILN_CUDA_STUB;
#else
  return "";
#endif
}

TEST(CudaDriverTest, NoDriverIsOneClearLine) {
  if (haveCudaDriver())
    GTEST_SKIP() << "this machine has a CUDA driver";
  EngineOptions options;
  options.weights = "synthetic:5";
  const std::string message = errorOf([&] { Engine::create(gpuArtifact(), options); });
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind("gpu.kiln: no CUDA ", 0), 0u) << message;
  EXPECT_HAS(message, ": this artifact is for nvptx sm_90 (+ptx78)");
  if (message.find("(libcuda.so.1)") != std::string::npos)
    EXPECT_EQ(message, "gpu.kiln: no CUDA driver (libcuda.so.1): this "
                       "artifact is for nvptx sm_90 (+ptx78)");
  // The same on the second try: the driver is looked for once per process.
  EXPECT_EQ(errorOf([&] { Engine::create(gpuArtifact(), options); }), message);
}

TEST(CudaDriverTest, KilnRunReportsNoDriverOnOneLine) {
  if (haveCudaDriver())
    GTEST_SKIP() << "this machine has a CUDA driver";
  std::string dir = ::testing::TempDir() + "/kiln-cuda-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::vector<uint8_t> bytes = serializeGpu(nvptxTestArtifact(), nvptxTestShapes());
  std::ofstream(dir + "/gpu.kiln", std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  std::ostringstream out, err;
  const int status = kilnRunMain({dir + "/gpu.kiln", "--weights", "synthetic:5", "--prompt-ids",
                                  "1,2,3", "--max-new-tokens", "2", "--device", "0"},
                                 out, err, false);
  const std::string text = err.str();
  EXPECT_EQ(status, 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_HAS(text, "kiln-run: error: " + dir + "/gpu.kiln: no CUDA ");
  EXPECT_HAS(text, "this artifact is for nvptx sm_90");
  std::filesystem::remove_all(dir);
}

TEST(CudaDriverTest, TheToolkitStubIsNamedAsSuch) {
  const std::string stub = stubLibrary();
  if (stub.empty() || !std::filesystem::exists(stub))
    GTEST_SKIP() << "no CUDA toolkit stub libcuda.so here";
  const std::string direct = errorOf([&] { cuda::CudaDriver::load(stub); });
  EXPECT_EQ(direct, "no CUDA driver (" + stub +
                        " is the CUDA toolkit's stub library, not a driver: "
                        "cuInit returned CUDA_ERROR_STUB_LIBRARY)");
  EXPECT_EQ(errorOf([&] { createCudaBackend(gpuArtifact(), 0, stub); }),
            "gpu.kiln: " + direct + ": this artifact is for nvptx sm_90 (+ptx78)");
}

TEST(CudaDriverTest, AMissingLibraryIsNamed) {
  EXPECT_EQ(errorOf([] { cuda::CudaDriver::load("libkiln-no-such-cuda.so"); }),
            "no CUDA driver (libkiln-no-such-cuda.so)");
  EXPECT_EQ(errorOf([] { createCudaBackend(gpuArtifact(), 0, "libkiln-no-such-cuda.so"); }),
            "gpu.kiln: no CUDA driver (libkiln-no-such-cuda.so): this "
            "artifact is for nvptx sm_90 (+ptx78)");
}

TEST(CudaDriverTest, RulesComeBeforeTheDriver) {
  TestArtifact a = nvptxTestArtifact();
  std::get<TestLaunch>(a.entryPoints[0].steps[0]).scalars.push_back({fb::ScalarKind::Part, 0});
  EXPECT_HAS(errorOf([&] { createCudaBackend(gpuArtifact(a), 0, "libkiln-no-such-cuda.so"); }),
             "takes a Part scalar");
}

TEST(CudaDriverTest, ErrorNamesWithoutADriver) {
  EXPECT_EQ(cuda::knownCudaErrorName(34), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(cuda::knownCudaErrorName(100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(cuda::knownCudaErrorName(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(cuda::knownCudaErrorName(12345), "CUDA error 12345");
}

} // namespace
} // namespace kiln
