// The engine on an NVIDIA GPU (ctest label "cuda"; every test skips where
// there is no usable CUDA device): a hand-built nvptx artifact whose kernels
// are hand-written PTX (NvptxTestArtifact.h) runs prefill in chunks and decode
// steps (the first direct, the second recorded as a CUDA graph, later ones
// replayed with their PastTokens arguments updated), checked against the same
// arithmetic on the host; then what the device refuses. Hopper kernels
// (schema 1.5): the same model with its embedding by TMA bulk tensor copies
// through tensor maps in 66 KiB of dynamic shared memory, the backend's maps
// launched directly (swizzle, zeros past a buffer, encoding again when a
// buffer moves, before a replay too), and the opt-in shared memory limit.
#include "runtime/engine/Engine.h"

#include "models/muse_spark/SyntheticWeights.h"
#include "runtime/core/Float.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaDriverTable.h"
#include "runtime/gpu/GpuGraph.h"
#include "runtime/tools/kiln-run/KilnRun.h"

#include "test/unit/runtime_cuda/NvptxTestArtifact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

namespace kiln {
namespace {

using namespace kiln::cuda_test;

// The kernels' arithmetic on the host: the KV cache holds the embedding of
// every token so far; logit v is one fma chain over its rows and columns.
class Reference {
public:
  explicit Reference(uint64_t seed) {
    const muse_spark::Config config = muse_spark::loadConfig("muse-spark-tiny");
    embed_ = weight(config, "model.embed_tokens.weight", seed);
    lm_ = weight(config, "lm_head.weight", seed);
  }

  std::vector<float> append(const std::vector<int32_t> &tokens) {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    std::vector<float> logits(kVocab);
    for (int64_t v = 0; v < kVocab; ++v) {
      float sum = 0;
      for (int32_t token : history_)
        for (int64_t h = 0; h < kHidden; ++h)
          sum = std::fma(embed_[token * kHidden + h], lm_[v * kHidden + h], sum);
      logits[v] = sum;
    }
    return logits;
  }

  void reset() { history_.clear(); }

private:
  static std::vector<float> weight(const muse_spark::Config &config, const std::string &name,
                                   uint64_t seed) {
    for (const auto &spec : muse_spark::checkpointManifest(config, muse_spark::WeightFormat::BF16))
      if (spec.name == name) {
        std::vector<uint16_t> bits(spec.shape[0] * spec.shape[1]);
        muse_spark::synthesizeTensor(config, spec, seed, reinterpret_cast<uint8_t *>(bits.data()));
        std::vector<float> values;
        for (uint16_t b : bits)
          values.push_back(bf16ToFloat(b));
        return values;
      }
    ADD_FAILURE() << name;
    return {};
  }

  std::vector<float> embed_, lm_;
  std::vector<int32_t> history_;
};

void expectLogits(const std::vector<float> &actual, const std::vector<float> &expected,
                  const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t v = 0; v < actual.size(); ++v)
    ASSERT_NEAR(actual[v], expected[v], 1e-5 * (1 + std::abs(expected[v])))
        << what << ", logit " << v;
}

std::vector<int32_t> prompt(int count, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back((37 * i + 11 + salt) % kVocab);
  return ids;
}

class CudaEngineTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::shared_ptr<const cuda::CudaDriver> driver;
    try {
      driver = cuda::CudaDriver::system();
    } catch (const cuda::CudaUnavailable &error) {
      GTEST_SKIP() << "no CUDA device: " << error.what();
    }
    const cuda::CudaApi &api = driver->api();
    int count = 0;
    cuda::CUdevice device = 0;
    if (api.cuDeviceGetCount(&count) != cuda::kSuccess || count < 1 ||
        api.cuDeviceGet(&device, 0) != cuda::kSuccess ||
        api.cuDeviceGetAttribute(&major_, cuda::kAttrComputeCapabilityMajor, device) !=
            cuda::kSuccess)
      GTEST_SKIP() << "no CUDA device";
    if (major_ < 9)
      GTEST_SKIP() << "the test kernels are sm_90 PTX; device 0 has compute "
                      "capability "
                   << major_ << ".x";
  }

  static std::unique_ptr<Engine> make(const TestArtifact &a, const LaunchShapes &shapes,
                                      EngineOptions options = {}) {
    if (options.weights.empty())
      options.weights = "synthetic:5";
    if (options.contextLength == 0)
      options.contextLength = 64;
    return Engine::create(Artifact::fromBytes(serializeGpu(a, shapes), "gpu.kiln"), options);
  }
  static std::unique_ptr<Engine> make() { return make(nvptxTestArtifact(), nvptxTestShapes()); }

  int major_ = 0;
};

TEST_F(CudaEngineTest, PrefillAndDecodeMatchReference) {
  auto engine = make();
  EXPECT_HAS(engine->device(), "compute capability");
  EXPECT_HAS(engine->device(), "device 0");
  EXPECT_EQ(engine->weightBytes(), 2u * kVocab * kHidden * 2);
  EXPECT_EQ(engine->kvCacheBytes(), 2u * 64 * kHidden * 4);
  EXPECT_EQ(engine->arenaBytes(), kArenaBytes); // one arena, shared by the entry points
  Reference reference(5);
  // 11 tokens: chunks of 8 and 3.
  const std::vector<int32_t> ids = prompt(11);
  expectLogits(engine->prefill(ids), reference.append(ids), "prefill");
  // Decode: direct, recorded, then replayed with PastTokens updated.
  for (int step = 0; step < 5; ++step) {
    const int32_t token = (7 * step + 3) % kVocab;
    expectLogits(engine->decode(token), reference.append({token}),
                 "decode step " + std::to_string(step));
  }
  EXPECT_EQ(engine->pastTokens(), 16);
}

TEST_F(CudaEngineTest, ProfileDecodeTimesLaunchesWithEvents) {
  auto engine = make();
  Reference reference(5);
  const std::vector<int32_t> ids = prompt(6);
  engine->prefill(ids);
  reference.append(ids);
  engine->decode(1); // direct
  reference.append({1});
  engine->decode(2); // recorded
  reference.append({2});
  // Launch by launch between the graph's replays; the logits stay right.
  const std::vector<Engine::StepTime> times = engine->profileDecode(3);
  reference.append({3});
  EXPECT_FALSE(times.empty());
  for (const Engine::StepTime &t : times) {
    EXPECT_FALSE(t.kernel.empty());
    EXPECT_GT(t.milliseconds, 0.0) << t.kernel; // CUDA events: each launch takes time
  }
  EXPECT_EQ(engine->pastTokens(), 9);
  expectLogits(engine->decode(4), reference.append({4}), "replay after a profile");
}

TEST_F(CudaEngineTest, ResetZeroesTheCaches) {
  auto engine = make();
  Reference reference(5);
  const std::vector<float> first = engine->prefill(prompt(6));
  engine->decode(1);
  engine->decode(2);
  engine->decode(3); // replayed
  engine->reset();
  EXPECT_EQ(engine->pastTokens(), 0);
  EXPECT_EQ(engine->prefill(prompt(6)), first);
  reference.append(prompt(6));
  // The recording lives on; past starts again from 6.
  expectLogits(engine->decode(9), reference.append({9}), "after reset");
}

TEST_F(CudaEngineTest, PrefillAndDecodeShareOneEntryPoint) {
  TestArtifact a = nvptxTestArtifact();
  a.entryPoints.pop_back(); // decode runs prefill at T = 1, recorded
  auto engine = make(a, nvptxTestShapes());
  Reference reference(5);
  expectLogits(engine->prefill(prompt(5)), reference.append(prompt(5)), "a");
  for (int32_t token : {4, 5, 6})
    expectLogits(engine->decode(token), reference.append({token}), "b");
  // A prefill between replays runs directly, with its own T.
  expectLogits(engine->prefill(prompt(4, 2)), reference.append(prompt(4, 2)), "c");
  for (int32_t token : {7, 8})
    expectLogits(engine->decode(token), reference.append({token}), "d");
}

TEST_F(CudaEngineTest, KilnRunNamesTheDevice) {
  std::string dir = ::testing::TempDir() + "/kiln-cuda-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::vector<uint8_t> bytes = serializeGpu(nvptxTestArtifact(), nvptxTestShapes());
  std::ofstream(dir + "/gpu.kiln", std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  std::ostringstream out, err;
  const int status =
      kilnRunMain({dir + "/gpu.kiln", "--weights", "synthetic:5", "--prompt-ids", "1,2,3,4,5",
                   "--max-new-tokens", "4", "--context", "64", "--device", "0"},
                  out, err, false);
  EXPECT_EQ(status, 0) << err.str();
  EXPECT_HAS(err.str(), "kiln-run: muse-spark-tiny for nvptx sm_90 (+ptx78): ");
  EXPECT_HAS(err.str(), " s; on ");
  EXPECT_HAS(err.str(), "(compute capability ");
  EXPECT_HAS(out.str(), "time per output token: ");
  std::filesystem::remove_all(dir);
}

TEST_F(CudaEngineTest, RefusesAChipTheDeviceCannotRun) {
  TestArtifact a = nvptxTestArtifact();
  a.chip = major_ >= 10 ? "sm_90a" : "sm_100a";
  const std::string message = errorOf([&] { make(a, nvptxTestShapes()); });
  EXPECT_HAS(message, "gpu.kiln: artifact is for nvptx " + a.chip +
                          " (+ptx78), which this machine cannot run: device 0 (");
  EXPECT_HAS(message, ") has compute capability ");
  EXPECT_HAS(message, a.chip + " needs compute capability ");
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST_F(CudaEngineTest, BrokenPtxReportsTheDriversLog) {
  TestArtifact a = nvptxTestArtifact();
  std::string ptx = kNvptxTestKernels;
  const std::string line = "ld.param.u64 %rd7, [tokens];";
  ptx.replace(ptx.find(line), line.size(), "ld.param.u64 %rd7, [nowhere];");
  a.blob = ptxBlob(ptx);
  const std::string message = errorOf([&] { make(a, nvptxTestShapes()); });
  EXPECT_HAS(message, "gpu.kiln: loading the PTX module for nvptx sm_90");
  EXPECT_HAS(message, "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX");
  EXPECT_HAS(message, "nowhere"); // from the JIT compiler's log
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST_F(CudaEngineTest, MissingKernelAndDevice) {
  TestArtifact a = nvptxTestArtifact();
  a.kernels[2].name = "kiln_absent";
  EXPECT_HAS(errorOf([&] { make(a, nvptxTestShapes()); }),
             "gpu.kiln: kernel 'kiln_absent' (not in the PTX module?): "
             "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND");
  EngineOptions options;
  options.device = 99;
  EXPECT_HAS(errorOf([&] { make(nvptxTestArtifact(), nvptxTestShapes(), options); }),
             "gpu.kiln: no CUDA device 99 (this machine has ");
}

// ---------------------------------------------------------------------------
// Hopper kernels (schema 1.5): tensor maps and dynamic shared memory.

TEST_F(CudaEngineTest, TensorMapsAndLargeSharedMemoryMatchReference) {
  // The embedding by bulk tensor copies through two maps (the weight's rows
  // in, x's rows out) in 66 KiB of dynamic shared memory: prefill in chunks
  // of 8 and 3 (x's map encoded for each T), decode direct, recorded, then
  // replayed.
  auto engine = make(tmaTestArtifact(), nvptxTestShapes());
  Reference reference(5);
  const std::vector<int32_t> ids = prompt(11);
  expectLogits(engine->prefill(ids), reference.append(ids), "prefill");
  for (int step = 0; step < 5; ++step) {
    const int32_t token = (7 * step + 3) % kVocab;
    expectLogits(engine->decode(token), reference.append({token}),
                 "decode step " + std::to_string(step));
  }

  // One entry point for both: a prefill between replays re-encodes x's map
  // for its T, the next replay encodes it back.
  TestArtifact one = tmaTestArtifact();
  one.entryPoints.pop_back();
  auto shared = make(one, nvptxTestShapes());
  Reference again(5);
  expectLogits(shared->prefill(prompt(5)), again.append(prompt(5)), "a");
  for (int32_t token : {4, 5, 6})
    expectLogits(shared->decode(token), again.append({token}), "b");
  expectLogits(shared->prefill(prompt(4, 2)), again.append(prompt(4, 2)), "c");
  for (int32_t token : {7, 8})
    expectLogits(shared->decode(token), again.append({token}), "d");
}

// Direct launches of kiln_tma_tile on the backend: what a map reads (its
// dimensions, strides, box and 128-byte swizzle, zeros past the buffer), and
// when it is encoded again.
class CudaTensorMapTest : public CudaEngineTest {
protected:
  static constexpr int64_t kRows = 5, kColumns = 128;

  void SetUp() override {
    CudaEngineTest::SetUp();
    if (IsSkipped())
      return;
    artifact_.emplace(
        Artifact::fromBytes(serializeGpu(tmaTestArtifact(), nvptxTestShapes()), "gpu.kiln"));
    backend_ = createCudaBackend(*artifact_, 0);
    backend_->loadKernels(*artifact_);
    for (int b = 0; b < 2; ++b) {
      std::vector<uint16_t> &host = hosts_[b];
      for (int64_t i = 0; i < kRows * kColumns; ++i)
        host.push_back(static_cast<uint16_t>(0x3c00 + 1024 * b + i));
      // 16 bytes more: room for a misaligned view.
      x_[b] = DeviceMemory::allocate(*backend_, host.size() * 2 + 16, "x");
      backend_->upload(x_[b].address(), host.data(), host.size() * 2);
    }
    y_ = DeviceMemory::allocate(*backend_, 8 * kColumns * 2, "y");
  }

  LaunchSpec tileSpec() const {
    LaunchSpec spec;
    spec.kernel = kTmaTileKernel;
    spec.where = "tile";
    spec.ranks = {2, 2};
    spec.scalarKinds = {fb::ScalarKind::TensorMap};
    spec.block = 128;
    spec.maxGrid = 2;
    spec.sharedBytes = kTmaTileSharedBytes;
    spec.tensorMaps = {{0, DType::BF16, {64, 8}, 128}};
    return spec;
  }

  // The call of the tile launch on x at `address`.
  LaunchCall call(DeviceAddress address) {
    arguments_[0] = buffer(address, {kRows, kColumns});
    arguments_[1] = buffer(y_.address(), {8, kColumns});
    LaunchCall result;
    result.buffers = arguments_;
    result.scalars = &mapIndex_;
    result.grid = 2;
    return result;
  }

  // y after `issue`, which starts from y full of 0xffff.
  std::vector<uint16_t> yAfter(const std::function<void()> &issue) {
    backend_->fill(y_.address(), 0xff, 8 * kColumns * 2);
    issue();
    std::vector<uint16_t> y(8 * kColumns);
    backend_->download(y.data(), y_.address(), y.size() * 2);
    return y;
  }

  // x[b]'s 5 rows, then 3 rows of zeros (the box reaches past the buffer).
  std::vector<uint16_t> expected(int b) const {
    std::vector<uint16_t> y = hosts_[b];
    y.resize(8 * kColumns, 0);
    return y;
  }

  static BufferArgument buffer(DeviceAddress address, std::vector<int64_t> sizes) {
    BufferArgument argument;
    argument.address = address;
    argument.rank = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d)
      argument.sizes[d] = sizes[d];
    return argument;
  }

  std::optional<Artifact> artifact_;
  std::unique_ptr<gpu::GpuBackend> backend_;
  std::vector<uint16_t> hosts_[2];
  DeviceMemory x_[2], y_;
  BufferArgument arguments_[2];
  int64_t mapIndex_ = 0;
};

TEST_F(CudaTensorMapTest, ReadsTheBoxThroughTheSwizzle) {
  const auto tile = backend_->prepare(tileSpec());
  for (int b : {0, 1, 0}) // each new address is a new map
    EXPECT_EQ(yAfter([&] { backend_->launch(*tile, call(x_[b].address())); }), expected(b))
        << "x " << b;
}

TEST_F(CudaTensorMapTest, ReplaysEncodeMovedBuffersAgain) {
  const auto tile = backend_->prepare(tileSpec());
  const LaunchCall first = call(x_[0].address());
  backend_->launch(*tile, first); // direct, then recorded with the same map
  std::unique_ptr<Recording> recording =
      backend_->record([&] { backend_->launch(*tile, call(x_[0].address())); });
  EXPECT_EQ(yAfter([&] { recording->replay(); }), expected(0));
  // The node takes x's new descriptor, and still the map's address: the
  // kernel reads x only through the map, whose contents follow the buffer.
  recording->update(*tile, call(x_[1].address()));
  EXPECT_EQ(static_cast<gpu::GpuGraph &>(*recording).numUpdates(), 1u);
  EXPECT_EQ(yAfter([&] { recording->replay(); }), expected(1));
  recording->update(*tile, call(x_[1].address())); // nothing moved: nothing to do
  EXPECT_EQ(static_cast<gpu::GpuGraph &>(*recording).numUpdates(), 1u);
  EXPECT_EQ(yAfter([&] { recording->replay(); }), expected(1));

  // A map that would change while the stream is captured.
  const std::string message =
      errorOf([&] { backend_->record([&] { backend_->launch(*tile, call(x_[0].address())); }); });
  EXPECT_HAS(message, "gpu.kiln: tile: tensor_maps[0] (over buffers[0]): its buffer's address "
                      "or sizes changed while the decode step was being recorded");
  // The backend runs on.
  EXPECT_EQ(yAfter([&] { backend_->launch(*tile, call(x_[0].address())); }), expected(0));
}

TEST_F(CudaTensorMapTest, RefusesWhatAMapOrTheKernelCannotTake) {
  const auto tile = backend_->prepare(tileSpec());
  EXPECT_HAS(errorOf([&] { backend_->launch(*tile, call(x_[0].address() + 8)); }),
             "gpu.kiln: tile: tensor_maps[0] (over buffers[0]): the buffer's address 0x");
  EXPECT_HAS(errorOf([&] { backend_->launch(*tile, call(x_[0].address() + 8)); }),
             " is not 16-byte aligned");
  LaunchSpec spec = tileSpec();
  spec.sharedBytes = kTmaTileSharedBytes + 1;
  EXPECT_EQ(errorOf([&] { backend_->prepare(spec); }),
            "gpu.kiln: tile: " + std::to_string(kTmaTileSharedBytes + 1) +
                " bytes of dynamic shared memory, but kernel 'kiln_tma_tile' was loaded for at "
                "most " +
                std::to_string(kTmaTileSharedBytes) +
                " (its Kernel.shared_bytes, or the device's default)");
  spec = tileSpec();
  spec.tensorMaps[0].box = {64, 8, 1};
  EXPECT_EQ(errorOf([&] { backend_->prepare(spec); }),
            "gpu.kiln: tile: tensor_maps[0] (over buffers[0]): a box of 3 sides for a rank-2 "
            "buffer (one per dimension, innermost first)");
  // The backend was not stopped: these are the runtime's refusals, not CUDA errors.
  EXPECT_EQ(yAfter([&] { backend_->launch(*tile, call(x_[1].address())); }), expected(1));
}

TEST_F(CudaEngineTest, RefusesSharedMemoryBeyondTheDevicesLimit) {
  // 1 KiB static and all but 512 bytes of an H100/H200 block dynamic.
  TestArtifact a = tmaTestArtifact();
  a.kernels[kStaticsKernel].sharedBytes = 232448 - 512;
  const std::string message = errorOf([&] { make(a, nvptxTestShapes()); });
  EXPECT_HAS(message, "gpu.kiln: kernel 'kiln_statics' needs 231936 bytes of dynamic shared "
                      "memory (Kernel.shared_bytes) and 1024 static; ");
  EXPECT_HAS(message, ", device 0 gives a block at most ");
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

} // namespace
} // namespace kiln
