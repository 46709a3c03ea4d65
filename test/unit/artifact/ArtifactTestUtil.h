// Building Kiln artifacts in tests: a plain C++ description of an artifact
// (easy to change field by field) and its serialisation with the flatbuffers
// builder. minimalArtifact() is small and valid: 2 kernels, 1 weight, 1 KV
// cache, 2 entry points with a few launches and a copy.
#pragma once

#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ArtifactDigest.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::artifact_test {

namespace fb = kiln::artifact;

struct TestBuffer {
  fb::BufferKind kind = fb::BufferKind::Arena;
  uint32_t index = 0;
  uint64_t offset = 0;
  std::vector<fb::Dim> shape;
  fb::DType dtype = fb::DType::F32;
};

struct TestScalar {
  fb::ScalarKind kind = fb::ScalarKind::Constant;
  int64_t value = 0;
};

// Launch.tensor_maps (schema 1.5): box innermost first.
struct TestTensorMap {
  uint32_t buffer = 0;
  std::vector<uint32_t> box;
  uint8_t swizzle = 0;
};

struct TestLaunch {
  uint32_t kernel = 0;
  std::vector<TestBuffer> buffers;
  std::vector<TestScalar> scalars;
  uint32_t maxParts = 1;
  std::string op;
  std::vector<TestTensorMap> tensorMaps;
};

struct TestCopy {
  TestBuffer source, destination;
};

struct TestCollective {
  fb::CollectiveKind kind = fb::CollectiveKind::AllReduce;
  TestBuffer source, destination;
  uint32_t commGroup = 0;
  int32_t axis = 0;
};

struct TestCommGroup {
  std::string name;
  uint32_t size = 1;
  std::vector<int32_t> ranks;
  uint64_t exchangeBytes = 0;
};

using TestStep = std::variant<TestLaunch, TestCopy, TestCollective>;

struct TestEntryPoint {
  std::string name;
  uint32_t maxTokens = 1;
  uint64_t arenaBytes = 0;
  std::vector<TestStep> steps;
  std::optional<fb::Dim> logitsRows;
  uint32_t sequences = 0;  // batched decode: token t continues conversation t
  uint32_t tokenSplit = 0; // sequence parallelism: ranks sharing a call's tokens
};

struct TestWeight {
  std::string name;
  uint32_t stack = 0, firstExpert = 0;
  std::vector<int64_t> shape;
  fb::DType dtype = fb::DType::BF16;
  fb::WeightTransform transform = fb::WeightTransform::None;
  int32_t sliceDim = -1, sliceCount = 1;
  uint64_t bytes = 0;
  int32_t sliceGroup = -1;
};

struct TestKvCache {
  uint32_t layer = 0, window = 0, kvHeads = 1, headDim = 1;
  fb::DType dtype = fb::DType::BF16;
  uint32_t ring = 0;       // schema 1.7: a sliding layer's slots (0: window)
  uint32_t pageTokens = 0; // schema 1.8: a global layer's page (0: unpaged)
};

struct TestKernel {
  std::string name, op, tiling;
  uint32_t sharedBytes = 0; // dynamic shared memory (schema 1.5)
};

struct TestArtifact {
  // Version.
  bool hasVersion = true;
  uint32_t schemaMajor = fb::kSchemaMajor, schemaMinor = fb::kSchemaMinor;
  bool hasDigests = true; // sealed as kilnc seals them (ArtifactDigest.h)
  std::string compiler = "kilnc test";
  // Target.
  bool hasTarget = true;
  fb::TargetKind targetKind = fb::TargetKind::X86;
  std::string triple = "x86_64-unknown-linux-gnu", chip = "sapphirerapids";
  std::vector<std::string> features = {"amx-bf16", "avx512bf16"};
  // Model.
  bool hasModel = true;
  std::string modelName = "muse-spark-test", weightFormat = "bf16";
  // What every artifact's config must say (ModelFacts.h).
  std::string configJson =
      R"({"model_type":"muse_spark","vocab_size":64,"max_position_embeddings":4096})";
  // Layout.
  bool hasLayout = true;
  int32_t tp = 1, ep = 1, world = 1, rank = 0;
  bool sp = false;
  std::vector<TestCommGroup> commGroups;

  std::vector<TestWeight> weights;
  std::vector<TestKvCache> kvCaches;
  std::vector<TestKernel> kernels;
  // Library.
  bool hasLibrary = true;
  std::string libraryFormat = "elf-shared-object";
  std::vector<uint8_t> blob;
  // Entry points.
  bool hasEntryPoints = true;
  std::vector<TestEntryPoint> entryPoints;
};

inline fb::Dim fixed(int64_t size) { return fb::Dim(size, 0, 1); }
// T rows rounded up to `align`.
inline fb::Dim tokens(int64_t align = 1) { return fb::Dim(0, 1, align); }

inline TestBuffer arena(uint64_t offset, std::vector<fb::Dim> shape, fb::DType dtype) {
  return {fb::BufferKind::Arena, 0, offset, std::move(shape), dtype};
}

// The serialised artifact, with the "KILN" identifier.
inline std::vector<uint8_t> serialize(const TestArtifact &artifact);

// A small valid x86 artifact (see the file comment).
inline TestArtifact minimalArtifact();

inline std::vector<uint8_t> minimalArtifactBytes() { return serialize(minimalArtifact()); }

// ---------------------------------------------------------------------------

namespace detail {

inline flatbuffers::Offset<fb::BufferRef> buildBuffer(flatbuffers::FlatBufferBuilder &fbb,
                                                      const TestBuffer &buffer) {
  return fb::CreateBufferRef(fbb, buffer.kind, buffer.index, buffer.offset,
                             fbb.CreateVectorOfStructs(buffer.shape), buffer.dtype);
}

// The launch's tensor maps; none (an absent vector) when it has none.
inline flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::TensorMap>>>
buildTensorMaps(flatbuffers::FlatBufferBuilder &fbb, const TestLaunch &launch) {
  if (launch.tensorMaps.empty())
    return 0;
  std::vector<flatbuffers::Offset<fb::TensorMap>> maps;
  for (const TestTensorMap &map : launch.tensorMaps)
    maps.push_back(fb::CreateTensorMapDirect(fbb, map.buffer, &map.box, map.swizzle));
  return fbb.CreateVector(maps);
}

// A launch with its grid and block (GPU targets) or without (null, 0).
inline flatbuffers::Offset<fb::Launch> buildLaunch(flatbuffers::FlatBufferBuilder &fbb,
                                                   const TestLaunch &launch,
                                                   const fb::Dim *grid = nullptr,
                                                   uint32_t block = 0) {
  std::vector<flatbuffers::Offset<fb::BufferRef>> buffers;
  for (const TestBuffer &buffer : launch.buffers)
    buffers.push_back(buildBuffer(fbb, buffer));
  std::vector<flatbuffers::Offset<fb::Scalar>> scalars;
  for (const TestScalar &scalar : launch.scalars)
    scalars.push_back(fb::CreateScalar(fbb, scalar.kind, scalar.value));
  const auto maps = buildTensorMaps(fbb, launch);
  return fb::CreateLaunch(fbb, launch.kernel, fbb.CreateVector(buffers), fbb.CreateVector(scalars),
                          launch.maxParts, fbb.CreateString(launch.op), grid, block, maps);
}

inline flatbuffers::Offset<fb::StepEntry> buildStep(flatbuffers::FlatBufferBuilder &fbb,
                                                    const TestStep &step) {
  if (const auto *launch = std::get_if<TestLaunch>(&step)) {
    auto built = buildLaunch(fbb, *launch);
    return fb::CreateStepEntry(fbb, fb::Step::Launch, built.Union());
  }
  if (const auto *copy = std::get_if<TestCopy>(&step)) {
    auto source = buildBuffer(fbb, copy->source);
    auto destination = buildBuffer(fbb, copy->destination);
    auto built = fb::CreateCopy(fbb, source, destination);
    return fb::CreateStepEntry(fbb, fb::Step::Copy, built.Union());
  }
  const auto &collective = std::get<TestCollective>(step);
  auto source = buildBuffer(fbb, collective.source);
  auto destination = buildBuffer(fbb, collective.destination);
  auto built = fb::CreateCollectiveDirect(fbb, collective.kind, source, destination, nullptr,
                                          collective.axis, collective.commGroup);
  return fb::CreateStepEntry(fbb, fb::Step::Collective, built.Union());
}

} // namespace detail

inline std::vector<uint8_t> serialize(const TestArtifact &a) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<fb::Version> version;
  if (a.hasVersion)
    version = fb::CreateVersionDirect(fbb, a.schemaMajor, a.schemaMinor, a.compiler.c_str());
  flatbuffers::Offset<fb::Target> target;
  if (a.hasTarget) {
    auto features = fbb.CreateVectorOfStrings(a.features);
    target = fb::CreateTarget(fbb, a.targetKind, fbb.CreateString(a.triple),
                              fbb.CreateString(a.chip), features);
  }
  flatbuffers::Offset<fb::Model> model;
  if (a.hasModel)
    model = fb::CreateModelDirect(fbb, a.modelName.c_str(), a.configJson.c_str(),
                                  a.weightFormat.c_str());
  flatbuffers::Offset<fb::Layout> layout;
  if (a.hasLayout)
    layout = fb::CreateLayout(fbb, a.tp, a.ep, a.sp, a.world);

  std::vector<flatbuffers::Offset<fb::WeightBinding>> weights;
  for (const TestWeight &w : a.weights)
    weights.push_back(fb::CreateWeightBindingDirect(fbb, w.name.c_str(), w.stack, w.firstExpert,
                                                    &w.shape, w.dtype, w.transform, w.sliceDim,
                                                    w.sliceCount, w.bytes, w.sliceGroup));
  std::vector<flatbuffers::Offset<fb::KvCache>> caches;
  for (const TestKvCache &c : a.kvCaches)
    caches.push_back(fb::CreateKvCache(fbb, c.layer, c.window, c.kvHeads, c.headDim, c.dtype,
                                       c.ring, c.pageTokens));
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  for (const TestKernel &k : a.kernels)
    kernels.push_back(
        fb::CreateKernelDirect(fbb, k.name.c_str(), k.op.c_str(), k.tiling.c_str(), k.sharedBytes));
  flatbuffers::Offset<fb::KernelLibrary> library;
  if (a.hasLibrary)
    library = fb::CreateKernelLibraryDirect(fbb, a.libraryFormat.c_str(), &a.blob);

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::EntryPoint>>> entryPoints;
  if (a.hasEntryPoints) {
    std::vector<flatbuffers::Offset<fb::EntryPoint>> built;
    for (const TestEntryPoint &entry : a.entryPoints) {
      std::vector<flatbuffers::Offset<fb::StepEntry>> steps;
      for (const TestStep &step : entry.steps)
        steps.push_back(detail::buildStep(fbb, step));
      built.push_back(fb::CreateEntryPointDirect(
          fbb, entry.name.c_str(), entry.maxTokens, entry.arenaBytes, &steps,
          entry.logitsRows ? &*entry.logitsRows : nullptr, entry.sequences, entry.tokenSplit));
    }
    entryPoints = fbb.CreateVector(built);
  }

  std::vector<flatbuffers::Offset<fb::CommGroup>> groups;
  for (const TestCommGroup &group : a.commGroups)
    groups.push_back(fb::CreateCommGroupDirect(fbb, group.name.c_str(), group.size, &group.ranks,
                                               group.exchangeBytes));
  const fb::Digests unsealed(0, 0);
  auto root = fb::CreateArtifact(
      fbb, version, target, model, layout, a.rank, fbb.CreateVector(weights),
      fbb.CreateVector(caches), fbb.CreateVector(kernels), library, entryPoints,
      groups.empty() ? 0 : fbb.CreateVector(groups), a.hasDigests ? &unsealed : nullptr);
  fb::FinishArtifactBuffer(fbb, root);
  if (a.hasDigests)
    artifact::sealArtifact(fbb.GetBufferPointer(), fbb.GetSize());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

inline TestArtifact minimalArtifact() {
  using fb::BufferKind;
  using fb::DType;
  using fb::ScalarKind;
  TestArtifact a;
  a.configJson =
      R"({"model_type":"muse_spark","hidden_size":128,"vocab_size":64,"max_position_embeddings":4096})";
  // One [64, 128] bf16 projection, AMX-blocked.
  a.weights.push_back({"model.layers.0.mlp.up_proj.weight",
                       0,
                       0,
                       {64, 128},
                       DType::BF16,
                       fb::WeightTransform::VnniBf16,
                       -1,
                       1,
                       64 * 128 * 2});
  a.kvCaches.push_back({0, 0, 2, 16, DType::BF16});
  a.kernels.push_back({"linear_amx_bf16", "kiln.linear", R"({"kind":"amx","m":16,"n":16,"k":32})"});
  a.kernels.push_back({"attention_bf16", "kiln.attention", "{}"});
  a.blob = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  a.blob.resize(64, 0);

  // Activations: x bf16 [T16, 128] at 0, y f32 [T16, 64] right after; both
  // T * 256 bytes (rows rounded up to the AMX tile height).
  auto x = [](int64_t /*maxRows*/) { return arena(0, {tokens(16), fixed(128)}, DType::BF16); };
  auto y = [](int64_t maxRows) {
    return arena(static_cast<uint64_t>(maxRows) * 128 * 2, {tokens(16), fixed(64)}, DType::F32);
  };
  auto linear = [&](int64_t maxRows) {
    TestLaunch launch;
    launch.kernel = 0;
    launch.buffers = {
        x(maxRows), {BufferKind::Weight, 0, 0, {fixed(64), fixed(128)}, DType::BF16}, y(maxRows)};
    launch.scalars = {{ScalarKind::Tokens, 0}, {ScalarKind::Part, 0}, {ScalarKind::Parts, 0}};
    launch.maxParts = 4;
    launch.op = "model.layers.0.mlp.up_proj";
    return launch;
  };
  auto attention = [&](int64_t maxRows) {
    TestLaunch launch;
    launch.kernel = 1;
    launch.buffers = {{BufferKind::Input, 0, 0, {tokens()}, DType::I32},
                      {BufferKind::Input, 1, 0, {tokens()}, DType::I32},
                      y(maxRows),
                      {BufferKind::KvCache, 0, 0, {fixed(0), fixed(2), fixed(16)}, DType::BF16},
                      {BufferKind::KvCache, 1, 0, {fixed(0), fixed(2), fixed(16)}, DType::BF16},
                      {BufferKind::Output, 0, 0, {fixed(1), fixed(64)}, DType::F32}};
    launch.scalars = {
        {ScalarKind::Tokens, 0}, {ScalarKind::PastTokens, 0}, {ScalarKind::Constant, 7}};
    launch.op = "model.layers.0.self_attn";
    return launch;
  };

  TestEntryPoint prefill;
  prefill.name = "prefill";
  prefill.maxTokens = 32;
  prefill.arenaBytes = 32 * 256 * 2;
  prefill.steps = {linear(32), attention(32), TestCopy{y(32), x(32)}};
  prefill.logitsRows = fixed(1);
  a.entryPoints.push_back(prefill);

  TestEntryPoint decode;
  decode.name = "decode";
  decode.maxTokens = 1;
  decode.arenaBytes = 16 * 256 * 2; // one tile of rows
  decode.steps = {linear(16), attention(16)};
  decode.logitsRows = fixed(1);
  a.entryPoints.push_back(decode);
  return a;
}

} // namespace kiln::artifact_test
