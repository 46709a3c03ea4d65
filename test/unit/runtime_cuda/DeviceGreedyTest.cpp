// The greedy kernel every GPU artifact carries (targets/common/
// GreedyKernel.cpp), launched by runtime/engine/DeviceGreedy: rows of
// Muse Spark's vocabulary with their best entry placed where the kernel's
// threads, warps and blocks meet, ties, signed zeros, NaN and rows without a
// number, each against the host's argmax(). It reads a compiled artifact
// from scripts/gpu-data.sh (the kernel comes from kilnc, which a runtime-only
// build lacks); ctest label "cuda", skipped without a CUDA device.
#include "runtime/engine/DeviceGreedy.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaDriverTable.h"
#include "runtime/engine/Sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>

namespace kiln {
namespace {

constexpr int64_t kVocab = 202048;

TEST(DeviceGreedyTest, ChoosesWhatTheHostArgmaxChooses) {
  try {
    cuda::CudaDriver::system();
  } catch (const cuda::CudaUnavailable &error) {
    GTEST_SKIP() << "no CUDA device: " << error.what();
  }
  // Where scripts/gpu-data.sh put its artifacts (the gpu-end-to-end test's
  // KILN_GPU_DATA), by default the build's gpu-data.
  const char *data = std::getenv("KILN_GPU_DATA");
  const std::string path = (data ? std::string(data) : std::string(KILN_BINARY_DIR) + "/gpu-data") +
                           "/tiny-bf16.sm_90.kiln";
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/gpu-data.sh on a machine with the compiler";
  const Artifact artifact = Artifact::load(path);
  std::unique_ptr<gpu::GpuBackend> backend = createCudaBackend(artifact, 0);
  backend->loadKernels(artifact);

  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> rows;
  auto noise = [&] {
    std::vector<float> row(kVocab);
    for (float &v : row)
      v = normal(random);
    return row;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The best entry at either end, inside a warp's stride, past a block's.
  for (int64_t at : {int64_t(0), int64_t(31), int64_t(4097), int64_t(77777), kVocab - 1}) {
    rows.push_back(noise());
    rows.back()[size_t(at)] = 100.0f;
  }
  // Ties: the first wins, in one thread's stride and across blocks.
  rows.push_back(noise());
  rows.back()[900] = rows.back()[5] = rows.back()[150000] = 50.0f;
  // -0 before +0 compare equal: the first.
  rows.push_back(std::vector<float>(kVocab, -1.0f));
  rows.back()[3] = -0.0f;
  rows.back()[10] = 0.0f;
  // NaN never wins; +inf does; a row of -inf only: 0 (NaN only: below).
  rows.push_back(noise());
  rows.back()[0] = nan;
  rows.back()[100] = 90.0f;
  rows.push_back(noise());
  rows.back()[123456] = inf;
  rows.push_back(std::vector<float>(kVocab, -inf));
  // -inf counts as a number: the first one after NaNs.
  rows.push_back(std::vector<float>(kVocab, -inf));
  rows.back()[0] = rows.back()[1] = nan;
  // All negative, the best far from the start.
  rows.push_back(std::vector<float>(kVocab, -5.0f));
  rows.back()[200000] = -4.0f;

  const auto count = static_cast<int64_t>(rows.size());
  std::vector<float> flat;
  for (const auto &row : rows)
    flat.insert(flat.end(), row.begin(), row.end());
  DeviceMemory logits = DeviceMemory::allocate(*backend, flat.size() * 4, "logits");
  backend->upload(logits.address(), flat.data(), flat.size() * 4);
  std::unique_ptr<DeviceGreedy> greedy = DeviceGreedy::create(*backend, artifact, count);
  ASSERT_NE(greedy, nullptr) << "the artifact has no greedy kernel";
  const std::vector<int32_t> chosen = greedy->choose(logits.address(), count, kVocab);
  ASSERT_EQ(chosen.size(), rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    EXPECT_EQ(chosen[r], argmax(rows[r].data(), rows[r].size())) << "row " << r;
  // Fewer rows than room for: the same answers for those.
  EXPECT_EQ(greedy->choose(logits.address(), 2, kVocab),
            std::vector<int32_t>(chosen.begin(), chosen.begin() + 2));
  EXPECT_THROW(greedy->choose(logits.address(), count + 1, kVocab), std::exception);

  // A row of NaN only (the model computed no number) is an error, as the
  // host's argmax says, not token 0.
  std::vector<float> nanRows(noise());
  nanRows.resize(2 * size_t(kVocab), nan);
  EXPECT_THROW(argmax(nanRows.data() + kVocab, size_t(kVocab)), RuntimeError);
  backend->upload(logits.address(), nanRows.data(), nanRows.size() * 4);
  EXPECT_THROW(greedy->choose(logits.address(), 2, kVocab), RuntimeError);
}

} // namespace
} // namespace kiln
