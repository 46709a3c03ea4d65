// Programmatic dependent launch on an NVIDIA GPU (ctest label "cuda", skipped
// without a CUDA device): a compiled artifact whose kernels wait for the grid
// before them (Target.kernels_wait_for_prior_grid) gives, launched with
// programmatic stream serialization, the logits it gives launched one kernel
// after another (KILN_PROGRAMMATIC_LAUNCH=0), bit for bit: prefill in chunks,
// decode steps direct, recorded as a graph and replayed, the batched entry.
// A kernel that read its inputs before its wait would race with the kernel
// writing them, and the logits would differ (or differ from run to run). It
// reads scripts/gpu-data.sh's artifacts (KILN_GPU_DATA, by default the
// build's gpu-data).
#include "runtime/cuda/CudaDriver.h"
#include "runtime/engine/Engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace kiln {
namespace {

std::string gpuData(const std::string &name) {
  const char *data = std::getenv("KILN_GPU_DATA");
  return (data ? std::string(data) : std::string(KILN_BINARY_DIR) + "/gpu-data") + "/" + name;
}

struct Outcome {
  std::string device;
  std::vector<std::vector<float>> logits;
};

// Prefill of 300 tokens (chunks of the artifact's prefill entry), then 6
// decode steps and, with a decode_batch entry, 3 batched steps of every
// conversation.
Outcome run(const std::string &path, bool programmatic) {
  ::setenv("KILN_PROGRAMMATIC_LAUNCH", programmatic ? "1" : "0", 1);
  EngineOptions options;
  options.weights = "synthetic:7";
  options.contextLength = 512;
  std::unique_ptr<Engine> engine = Engine::create(Artifact::load(path), options);
  ::unsetenv("KILN_PROGRAMMATIC_LAUNCH");
  Outcome r;
  r.device = engine->device();
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 300; ++i)
    prompt.push_back((37 * i + 11) % 1000 + 1);
  r.logits.push_back(engine->prefill(prompt));
  for (int32_t step = 0; step < 6; ++step)
    r.logits.push_back(engine->decode((53 * step + 7) % 1000 + 1));
  if (engine->conversations() > 1)
    for (int32_t step = 0; step < 3; ++step) {
      std::vector<int32_t> tokens;
      for (int64_t c = 0; c < engine->conversations(); ++c)
        tokens.push_back(static_cast<int32_t>((29 * c + 17 * step + 5) % 1000 + 1));
      r.logits.push_back(engine->decodeBatch(tokens));
    }
  return r;
}

TEST(ProgrammaticLaunchTest, SameLogitsAsLaunchesOneAfterAnother) {
  try {
    cuda::CudaDriver::system();
  } catch (const cuda::CudaUnavailable &error) {
    GTEST_SKIP() << "no CUDA device: " << error.what();
  }
  for (const char *name : {"tiny-bf16.sm_90.kiln", "tiny-nvfp4.p512.sm_90.kiln"}) {
    const std::string path = gpuData(name);
    ASSERT_TRUE(std::filesystem::exists(path))
        << path << " is missing: run scripts/gpu-data.sh on a machine with the compiler";
    const Outcome programmatic = run(path, true), inOrder = run(path, false);
    EXPECT_NE(programmatic.device.find("programmatic launches"), std::string::npos)
        << name << ": " << programmatic.device;
    EXPECT_EQ(inOrder.device.find("programmatic"), std::string::npos) << inOrder.device;
    ASSERT_EQ(programmatic.logits.size(), inOrder.logits.size());
    for (size_t s = 0; s < inOrder.logits.size(); ++s)
      EXPECT_EQ(programmatic.logits[s], inOrder.logits[s])
          << name << (s == 0 ? ": prefill" : ": step " + std::to_string(s - 1));
  }
}

} // namespace
} // namespace kiln
