// Loading and checking Kiln artifacts: a valid one loads; truncated, bit-
// flipped, foreign, other-version and rule-breaking ones are refused with an
// ArtifactError naming the file and the field; atomic writes; kiln-dump.
#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ArtifactMemory.h"
#include "runtime/core/AtomicFile.h"
#include "runtime/tools/kiln-dump/KilnDump.h"

#include "test/unit/artifact/ArtifactTestUtil.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln {
namespace {

using namespace artifact_test;
namespace fs = std::filesystem;

constexpr const char *kSource = "test.kiln";

// The message of the ArtifactError `fn` throws; a test failure if it throws
// nothing or something else.
// What writeFileAtomically (runtime/core/AtomicFile.h) throws.
template <typename Fn> std::string writeErrorOf(Fn &&fn) {
  try {
    fn();
  } catch (const FileWriteError &error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a FileWriteError";
  return "";
}

template <typename Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const ArtifactError &error) {
    return error.what();
  } catch (const std::exception &error) {
    ADD_FAILURE() << "expected ArtifactError, got: " << error.what();
    return "";
  }
  ADD_FAILURE() << "expected ArtifactError, nothing thrown";
  return "";
}

std::string loadError(const TestArtifact &artifact) {
  return errorOf([&] { Artifact::fromBytes(serialize(artifact), kSource); });
}

#define EXPECT_CONTAINS_ALL(text, ...)                                                             \
  do {                                                                                             \
    const std::string kilnText_ = (text);                                                          \
    for (const char *kilnPart_ : {__VA_ARGS__})                                                    \
      EXPECT_NE(kilnText_.find(kilnPart_), std::string::npos)                                      \
          << "missing \"" << kilnPart_ << "\" in: " << kilnText_;                                  \
  } while (false)

// Every error is one line that starts with the file's name.
void expectOneLine(const std::string &message) {
  EXPECT_EQ(message.rfind(std::string(kSource) + ": ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TestLaunch &launchOf(TestArtifact &a, size_t entry, size_t step) {
  return std::get<TestLaunch>(a.entryPoints[entry].steps[step]);
}

// ---------------------------------------------------------------------------
// Valid artifacts.

TEST(ArtifactTest, MinimalArtifactLoads) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const Artifact artifact = Artifact::fromBytes(bytes, kSource);
  EXPECT_EQ(artifact.source(), kSource);
  EXPECT_EQ(artifact.bytes(), bytes);
  EXPECT_EQ(artifact->version()->schema_major(), artifact::kSchemaMajor);
  EXPECT_EQ(artifact->target()->kind(), fb::TargetKind::X86);
  EXPECT_EQ(artifact->model()->name()->str(), "muse-spark-test");
  EXPECT_EQ(artifact.numWeights(), 1u);
  EXPECT_EQ(artifact.numKvCaches(), 1u);
  EXPECT_EQ(artifact.numKernels(), 2u);
  EXPECT_EQ(artifact->library()->blob()->size(), 64u);
  ASSERT_NE(artifact.findEntryPoint("decode"), nullptr);
  EXPECT_EQ(artifact.findEntryPoint("verify"), nullptr);
  const fb::EntryPoint &prefill = artifact.entryPoint("prefill");
  EXPECT_EQ(prefill.max_tokens(), 32u);
  EXPECT_EQ(prefill.steps()->size(), 3u);
  EXPECT_CONTAINS_ALL(errorOf([&] { artifact.entryPoint("verify"); }),
                      "test.kiln: no entry point 'verify'", "'prefill'", "'decode'");
}

TEST(ArtifactTest, MovedArtifactStillReads) {
  Artifact first = Artifact::fromBytes(minimalArtifactBytes(), kSource);
  Artifact second = std::move(first);
  EXPECT_EQ(second.entryPoint("decode").max_tokens(), 1u);
}

TEST(ArtifactTest, LoadsFromAFile) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string path = ::testing::TempDir() + "/kiln-artifact-load.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());
  const Artifact artifact = Artifact::load(path);
  EXPECT_EQ(artifact.source(), path);
  EXPECT_EQ(artifact.bytes(), bytes);
  fs::remove(path);
}

TEST(ArtifactTest, UnreadableFilesNameThePath) {
  EXPECT_CONTAINS_ALL(errorOf([] { Artifact::load("/nonexistent/a.kiln"); }),
                      "/nonexistent/a.kiln: cannot open");
  EXPECT_CONTAINS_ALL(errorOf([] { Artifact::load("/"); }), "/: a directory, not a regular file");
}

TEST(ArtifactTest, CollectivesLoadInAMultiRankArtifact) {
  TestArtifact a = minimalArtifact();
  a.tp = 2;
  a.world = 2;
  a.commGroups = {{"tp[1]", 2, {1, 0}}};
  const TestBuffer y = std::get<TestLaunch>(a.entryPoints[0].steps[0]).buffers[2];
  TestBuffer half = y;
  half.shape[1] = fixed(32);
  a.entryPoints[0].steps.push_back(TestCollective{fb::CollectiveKind::AllReduce, y, y, 0, 0});
  a.entryPoints[0].steps.push_back(TestCollective{fb::CollectiveKind::AllGather, half, y, 0, 1});
  a.entryPoints[0].steps.push_back(
      TestCollective{fb::CollectiveKind::ReduceScatter, y, half, 0, 1});
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));

  a.entryPoints[0].steps.push_back(TestCollective{fb::CollectiveKind::AllGather, y, y, 0, 1});
  EXPECT_CONTAINS_ALL(loadError(a), "steps[6] (collective)", "AllGather over 2 ranks");
  a.entryPoints[0].steps.back() = TestCollective{fb::CollectiveKind::AllGather, half, y, 0, 2};
  EXPECT_CONTAINS_ALL(loadError(a), "steps[6] (collective).axis 2 is not a dimension");
  a.entryPoints[0].steps.back() = TestCollective{fb::CollectiveKind::AllReduce, y, y, 1, 0};
  EXPECT_CONTAINS_ALL(loadError(a), "steps[6] (collective).comm_group: comm group 1 does "
                                    "not exist (the artifact has 1");
}

TEST(ArtifactTest, MemoryPlanOfARank) {
  TestArtifact a = minimalArtifact();                   // one global layer: 2 KV heads x 16, bf16
  a.kvCaches.push_back({1, 8, 2, 16, fb::DType::BF16}); // a sliding ring of 8
  const Artifact artifact = Artifact::fromBytes(serialize(a), kSource);
  const ArtifactMemory memory = artifactMemory(artifact);
  EXPECT_EQ(memory.weightBytes, 64u * 128 * 2);
  EXPECT_EQ(memory.arenaBytes, 32u * 256 * 2); // the larger entry's: prefill's
  EXPECT_EQ(memory.globalKvBytesPerToken, 2u * 2 * 16 * 2);
  EXPECT_EQ(memory.slidingKvBytesPerToken, 2u * 2 * 16 * 2);
  EXPECT_EQ(memory.slidingKvBytes, 8u * 2 * 2 * 16 * 2);
  const uint64_t fixedBytes = memory.weightBytes + memory.arenaBytes + memory.slidingKvBytes;
  // What is left after the reserve holds that many tokens of global KV.
  EXPECT_EQ(kvTokensThatFit(memory, fixedBytes + 1000 + 128 * 10, 1000), 10);
  EXPECT_EQ(kvTokensThatFit(memory, fixedBytes + 999, 1000), -1);
  std::ostringstream out;
  EXPECT_FALSE(printMemoryPlan(out, memory, fixedBytes, 1));
  EXPECT_CONTAINS_ALL(out.str(), "does not fit: weights", "+ reserve 0.00 GiB");
}

TEST(ArtifactTest, TokenSplitNeedsItsRanks) {
  TestArtifact a = minimalArtifact();
  a.entryPoints[0].tokenSplit = 2;
  EXPECT_CONTAINS_ALL(loadError(a), ".token_split 2: splits one conversation's tokens over at "
                                    "most layout.world ranks (1)");
  a.tp = a.world = 2;
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.entryPoints[0].sequences = a.entryPoints[0].maxTokens;
  EXPECT_CONTAINS_ALL(loadError(a), "never a batched entry's");
}

TEST(ArtifactTest, ExchangeTablesNameAGroupWithExchangeMemory) {
  // An Exchange buffer: the [members] I64 table of comm group `index`'s
  // exchange memory, `offset` a 256-byte aligned site within it.
  TestArtifact a = minimalArtifact();
  a.ep = a.world = 2;
  a.commGroups = {{"ep[1]", 2, {0, 1}, 1024}};
  TestBuffer &table = launchOf(a, 0, 1).buffers[5];
  table = {fb::BufferKind::Exchange, 0, 512, {fixed(2)}, fb::DType::I64};
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  table.offset = 1024;
  EXPECT_CONTAINS_ALL(loadError(a), ".offset 1024: not a 256-byte aligned site within comm group "
                                    "0's 1024 exchange bytes");
  table.offset = 100;
  EXPECT_CONTAINS_ALL(loadError(a), ".offset 100: not a 256-byte aligned site");
  table.offset = 0;
  table.shape = {fixed(3)};
  EXPECT_CONTAINS_ALL(loadError(a), "an exchange table is [2] I64, one address per member of "
                                    "comm group 0");
  table.shape = {fixed(2)};
  table.dtype = fb::DType::I32;
  EXPECT_CONTAINS_ALL(loadError(a), "an exchange table is [2] I64");
  table.dtype = fb::DType::I64;
  a.commGroups[0].exchangeBytes = 0;
  EXPECT_CONTAINS_ALL(loadError(a), "within comm group 0's 0 exchange bytes");
}

TEST(ArtifactTest, CommGroupsPartitionTheWorld) {
  TestArtifact a = minimalArtifact();
  a.ep = a.world = 4;
  a.commGroups = {{"ep[1]", 4, {0, 1, 2, 3}}, {"tp[1]", 2, {0, 2, 1, 3}}};
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.commGroups[1].size = 3;
  EXPECT_CONTAINS_ALL(loadError(a), "comm_groups[1].size 3 does not divide layout.world 4");
  a.commGroups[1] = {"tp[1]", 2, {0, 2, 1}};
  EXPECT_CONTAINS_ALL(loadError(a), "comm_groups[1].ranks: 3 ranks, expected every rank");
  a.commGroups[1] = {"tp[1]", 2, {0, 2, 1, 2}};
  EXPECT_CONTAINS_ALL(loadError(a), "comm_groups[1].ranks: rank 2 is out of range or repeated");

  // A weight's slice follows its group: the count is the group's size.
  a.commGroups[1] = {"tp[1]", 2, {0, 2, 1, 3}};
  a.weights[0].sliceDim = 0;
  a.weights[0].sliceCount = 2;
  a.weights[0].bytes /= 2;
  for (size_t e = 0; e < a.entryPoints.size(); ++e)
    launchOf(a, e, 0).buffers[1].shape[0] = fixed(32);
  a.weights[0].sliceGroup = 1;
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.weights[0].sliceGroup = 0;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_count 2 differs from the size of its slice_group (4)");
  a.weights[0].sliceGroup = 2;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_group: comm group 2 does not exist");
}

TEST(ArtifactTest, ExpertStacksAndSlices) {
  TestArtifact a = minimalArtifact();
  a.weights.push_back({"model.layers.0.mlp.experts.{e}.down_proj.weight",
                       8,
                       8,
                       {64, 256},
                       fb::DType::BF16,
                       fb::WeightTransform::VnniBf16,
                       1,
                       2,
                       8 * 64 * 128 * 2});
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));

  a.weights[1].stack = 0;
  EXPECT_CONTAINS_ALL(loadError(a), "weights[1]", "expert stack");
}

// ---------------------------------------------------------------------------
// Damaged bytes.

TEST(ArtifactTest, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  ASSERT_GT(bytes.size(), 100u);
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + size);
    const std::string message =
        errorOf([&] { Artifact::fromBytes(std::move(truncated), kSource); });
    if (size < 8)
      EXPECT_CONTAINS_ALL(message, "too small to be a Kiln artifact");
    else
      EXPECT_CONTAINS_ALL(message, "corrupt: the flatbuffer does not verify");
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "at size " << size;
      return;
    }
  }
}

// Every byte of the kernel library is covered by its digest: each change is
// refused naming the library (a third of random flips inside it used to load
// and verify, issue 19); an artifact without digests is refused.
TEST(ArtifactTest, DigestsCatchEveryLibraryChange) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const Artifact clean = Artifact::fromBytes(bytes, kSource);
  const auto *blob = clean->library()->blob();
  ASSERT_GT(blob->size(), 0u);
  const size_t first = static_cast<size_t>(blob->data() - clean.bytes().data());
  for (size_t at = first; at < first + blob->size(); ++at) {
    std::vector<uint8_t> changed = bytes;
    changed[at] ^= 0x10;
    EXPECT_CONTAINS_ALL(errorOf([&] { Artifact::fromBytes(std::move(changed), kSource); }),
                        "corrupt: the kernel library's bytes do not match their digest (XXH64 0x");
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "at byte " << at;
      return;
    }
  }
  TestArtifact unsealed = minimalArtifact();
  unsealed.hasDigests = false;
  EXPECT_CONTAINS_ALL(errorOf([&] { Artifact::fromBytes(serialize(unsealed), kSource); }),
                      "digests: none", "recompile it with this kilnc");
}

// Two arena operands of one launch are the same bytes or disjoint (issue
// 19: metadata could move a buffer over another of the same launch).
TEST(ArtifactTest, PartlyOverlappingOperandsAreRefused) {
  TestArtifact a = minimalArtifact();
  // The linear's x is bf16 [32, 128] at 0 (8192 bytes at max_tokens), its y
  // f32 [32, 64] (8192 bytes).
  auto &linear = std::get<TestLaunch>(a.entryPoints[0].steps[0]);
  linear.buffers[2].offset = 4096;
  EXPECT_CONTAINS_ALL(loadError(a), "entry_points[0]", "buffers[0] (arena bytes 0..8192)",
                      "buffers[2] (4096..12288) overlap without being the same bytes");
  linear.buffers[2].offset = 0; // the same bytes: in place
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
}

// Bytes past the artifact's data (1 KiB appended was accepted, issue 19)
// are refused, however few, naming how many and where the data ends.
TEST(ArtifactTest, AppendedBytesAreRefused) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string end = "ends at byte " + std::to_string(bytes.size());
  for (size_t extra : {size_t{1}, size_t{4}, size_t{1024}}) {
    std::vector<uint8_t> longer = bytes;
    longer.resize(bytes.size() + extra, 0);
    const std::string what = "corrupt: " + std::to_string(extra) + " trailing byte";
    EXPECT_CONTAINS_ALL(errorOf([&] { Artifact::fromBytes(std::move(longer), kSource); }), kSource,
                        what.c_str(), end.c_str());
  }
}

// Random single-byte changes either still verify and pass every check (a
// change that keeps the meaning valid) or are refused with an ArtifactError;
// nothing else. What loads is printed by kiln-dump, which reads every field.
TEST(ArtifactTest, FlippedBytesAreRefusedOrHarmless) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  std::mt19937 random(20240229);
  std::uniform_int_distribution<size_t> position(0, bytes.size() - 1);
  std::uniform_int_distribution<int> delta(1, 255);
  int loaded = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> flipped = bytes;
    const size_t at = position(random);
    flipped[at] = static_cast<uint8_t>(flipped[at] + delta(random));
    try {
      const Artifact artifact = Artifact::fromBytes(std::move(flipped), kSource);
      std::ostringstream out;
      dumpArtifact(artifact, {true, true}, out);
      // Every buffer's size is computable for every T a call may pass.
      for (const fb::EntryPoint *entry : *artifact->entry_points()) {
        const auto *steps = entry->steps();
        for (flatbuffers::uoffset_t i = 0; steps && i < steps->size(); ++i) {
          const fb::Launch *launch = steps->Get(i)->step_as_Launch();
          const auto *refs = launch ? launch->buffers() : nullptr;
          for (flatbuffers::uoffset_t b = 0; refs && b < refs->size(); ++b)
            for (int64_t t = 1; t <= int64_t(entry->max_tokens()); t *= 2)
              EXPECT_GE(bufferBytes(*refs->Get(b), t), 0);
        }
      }
      ++loaded;
    } catch (const ArtifactError &error) {
      expectOneLine(error.what());
      ++refused;
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "round " << round << ", byte " << at;
      return;
    }
  }
  EXPECT_EQ(loaded + refused, 3000);
  // The digests cover every byte (ArtifactDigest.h): no change loads.
  EXPECT_EQ(loaded, 0);
  RecordProperty("loaded", loaded);
  std::printf("flipped bytes: %d loaded, %d refused\n", loaded, refused);
}

TEST(ArtifactTest, WrongIdentifier) {
  std::vector<uint8_t> bytes = minimalArtifactBytes();
  std::copy_n("GGUF", 4, bytes.begin() + 4);
  const std::string message = errorOf([&] { Artifact::fromBytes(bytes, kSource); });
  EXPECT_EQ(message, "test.kiln: not a Kiln artifact (identifier 'GGUF', expected 'KILN')");

  bytes[5] = 0;
  EXPECT_CONTAINS_ALL(errorOf([&] { Artifact::fromBytes(bytes, kSource); }),
                      "identifier 'G\\x00UF'");
}

TEST(ArtifactTest, AConfigWithoutTheModelsSizesIsRefusedAtLoad) {
  // What every tool reads of the model (ModelFacts.h) is checked with the
  // rest of the artifact, so that kiln-dump and kiln-check refuse what
  // kiln-run would.
  TestArtifact a = minimalArtifact();
  a.configJson = R"({"model_type":"muse_spark","vocab_size":64})";
  std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "model.config_json: field 'max_position_embeddings'",
                      "expected an integer in 1..16777216, got nothing");
  a.configJson = R"({"model_type":"muse_spark","vocab_size":"many","max_position_embeddings":8})";
  EXPECT_CONTAINS_ALL(loadError(a),
                      "field 'vocab_size': expected an integer in 1..16777216, got \"many\"");
  // Bounded before the runtime sizes logits by it (rows times vocab_size).
  a.configJson =
      R"({"model_type":"muse_spark","vocab_size":4611686018427387904,"max_position_embeddings":8})";
  EXPECT_CONTAINS_ALL(loadError(a), "field 'vocab_size': expected an integer in 1..16777216",
                      "4611686018427387904");
  a.configJson = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_CONTAINS_ALL(loadError(a), "model.config_json", "nesting deeper than");
}

TEST(ArtifactTest, WrongSchemaMajor) {
  TestArtifact a = minimalArtifact();
  a.schemaMajor = 2;
  a.schemaMinor = 3;
  const std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "version.schema_major", "schema version 2.3", "kilnc test",
                      "this runtime reads schema version 1", "recompile it with this kilnc");

  a.schemaMajor = artifact::kSchemaMajor;
  a.schemaMinor = artifact::kSchemaMinor + 5; // newer minor: accepted
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
}

TEST(ArtifactTest, MissingRequiredTables) {
  const std::pair<bool TestArtifact::*, const char *> tables[] = {
      {&TestArtifact::hasVersion, "version"}, {&TestArtifact::hasTarget, "target"},
      {&TestArtifact::hasModel, "model"},     {&TestArtifact::hasLayout, "layout"},
      {&TestArtifact::hasLibrary, "library"}, {&TestArtifact::hasEntryPoints, "entry_points"},
  };
  for (const auto &[member, name] : tables) {
    TestArtifact a = minimalArtifact();
    a.*member = false;
    EXPECT_EQ(loadError(a), std::string("test.kiln: missing required table '") + name + "'");
  }
  TestArtifact a = minimalArtifact();
  a.entryPoints.clear();
  EXPECT_CONTAINS_ALL(loadError(a), "entry_points: the artifact has no");
}

// ---------------------------------------------------------------------------
// Target.

TEST(ArtifactTest, CheckTargetRefusesAnotherKind) {
  TestArtifact a = minimalArtifact();
  a.targetKind = fb::TargetKind::NVPTX;
  a.libraryFormat = "ptx";
  a.triple = "nvptx64-nvidia-cuda";
  a.chip = "sm_90";
  a.features = {};
  const Artifact artifact = Artifact::fromBytes(serialize(a), kSource);
  EXPECT_NO_THROW(checkTarget(artifact, fb::TargetKind::NVPTX));
  EXPECT_EQ(errorOf([&] { checkTarget(artifact, fb::TargetKind::X86); }),
            "test.kiln: artifact is for nvptx sm_90; this runtime runs x86 "
            "artifacts: rebuild with kilnc --target x86");
}

TEST(ArtifactTest, CheckTargetAsksAboutChipAndFeatures) {
  const Artifact artifact = Artifact::fromBytes(minimalArtifactBytes(), kSource);
  bool asked = false;
  checkTarget(artifact, fb::TargetKind::X86, [&](const fb::Target &target) {
    asked = true;
    EXPECT_EQ(target.chip()->str(), "sapphirerapids");
    return std::string();
  });
  EXPECT_TRUE(asked);

  auto noAmx = [](const fb::Target &target) {
    std::vector<std::string> missing =
        missingFeatures(target, [](std::string_view feature) { return feature != "amx-bf16"; });
    return missing.empty() ? std::string() : "the CPU lacks " + missing.front();
  };
  // A CPU's name says its features (kiln-dump lists them); the reason and
  // the remedy come from the backend.
  EXPECT_EQ(errorOf([&] {
              checkTarget(artifact, fb::TargetKind::X86, noAmx,
                          "rebuild it for this CPU: kilnc --target=x86 --cpu=host");
            }),
            "test.kiln: artifact is for x86 sapphirerapids, which this machine "
            "cannot run: the CPU lacks amx-bf16 (rebuild it for this CPU: "
            "kilnc --target=x86 --cpu=host)");
}

TEST(ArtifactTest, LibraryFormatMustSuitTheTarget) {
  TestArtifact a = minimalArtifact();
  a.libraryFormat = "ptx";
  EXPECT_EQ(loadError(a), "test.kiln: library.format 'ptx' is not the x86 "
                          "kernel format (expected 'elf-shared-object')");
  a = minimalArtifact();
  a.targetKind = static_cast<fb::TargetKind>(7);
  EXPECT_CONTAINS_ALL(loadError(a), "target.kind: unknown target kind 7");
  a = minimalArtifact();
  a.blob.clear();
  EXPECT_CONTAINS_ALL(loadError(a), "library.blob: empty");
}

// ---------------------------------------------------------------------------
// Kernels and launches.

TEST(ArtifactTest, KernelIndexOutOfRange) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 1, 1).kernel = 2;
  const std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "entry_points[1] 'decode': steps[1]",
                      "op 'model.layers.0.self_attn'", ".kernel 2", "out of range", "2 kernels");
}

TEST(ArtifactTest, DuplicateKernelNames) {
  TestArtifact a = minimalArtifact();
  a.kernels[1].name = a.kernels[0].name;
  EXPECT_EQ(loadError(a), "test.kiln: kernels[1].name 'linear_amx_bf16': duplicated");
}

TEST(ArtifactTest, KernelNamesAreSymbols) {
  for (const char *name : {"linear-amx", "a b", "kiln.x", "\xc3\xa9"}) {
    TestArtifact a = minimalArtifact();
    a.kernels[0].name = name;
    EXPECT_CONTAINS_ALL(loadError(a), "kernels[0].name", "not a symbol name ([A-Za-z0-9_]+)");
  }
  TestArtifact a = minimalArtifact();
  a.kernels[1].name = "";
  EXPECT_EQ(loadError(a), "test.kiln: kernels[1].name: empty");
}

TEST(ArtifactTest, LaunchFields) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 0).maxParts = 0;
  EXPECT_CONTAINS_ALL(loadError(a), "launch of 'linear_amx_bf16'", ".max_parts: must be >= 1");
  a = minimalArtifact();
  launchOf(a, 0, 1).scalars[2].kind = static_cast<fb::ScalarKind>(9);
  EXPECT_CONTAINS_ALL(loadError(a), "scalars[2].kind: unknown scalar kind 9");
}

// ---------------------------------------------------------------------------
// Hopper kernels (schema 1.5): dynamic shared memory and tensor maps.

// minimalArtifact() for nvptx sm_90a (its blob is NUL-terminated text).
TestArtifact nvptxArtifact() {
  TestArtifact a = minimalArtifact();
  a.targetKind = fb::TargetKind::NVPTX;
  a.libraryFormat = "ptx";
  a.triple = "nvptx64-nvidia-cuda";
  a.chip = "sm_90a";
  a.features = {};
  return a;
}

// The decode linear of nvptxArtifact() reading x (buffers[0], bf16 [T16,
// 128]) and the weight (buffers[1], bf16 [64, 128]) through tensor maps, and
// its kernel with 192 KiB of dynamic shared memory.
TestArtifact tensorMapArtifact() {
  TestArtifact a = nvptxArtifact();
  a.kernels[0].sharedBytes = 196608;
  TestLaunch &linear = launchOf(a, 1, 0);
  linear.tensorMaps = {{1, {64, 64}, 128}, {0, {8, 16}, 0}};
  linear.scalars.push_back({fb::ScalarKind::TensorMap, 1});
  linear.scalars.push_back({fb::ScalarKind::TensorMap, 0});
  return a;
}

TEST(ArtifactTest, TensorMapsAndSharedBytesLoad) {
  const Artifact artifact = Artifact::fromBytes(serialize(tensorMapArtifact()), kSource);
  EXPECT_EQ(artifact->kernels()->Get(0)->shared_bytes(), 196608u);
  EXPECT_EQ(artifact->kernels()->Get(1)->shared_bytes(), 0u);
  const fb::Launch &linear = *artifact.entryPoint("decode").steps()->Get(0)->step_as_Launch();
  ASSERT_EQ(linear.tensor_maps()->size(), 2u);
  const fb::TensorMap &weight = *linear.tensor_maps()->Get(0);
  EXPECT_EQ(weight.buffer(), 1u);
  EXPECT_EQ(std::vector<uint32_t>(weight.box()->begin(), weight.box()->end()),
            (std::vector<uint32_t>{64, 64}));
  EXPECT_EQ(weight.swizzle(), 128);
  EXPECT_EQ(linear.scalars()->Get(3)->kind(), fb::ScalarKind::TensorMap);
  EXPECT_EQ(linear.scalars()->Get(3)->value(), 1);
  // The limit itself, every swizzle span that holds the rows, an F32 map.
  TestArtifact a = tensorMapArtifact();
  a.kernels[0].sharedBytes = 232448;
  launchOf(a, 1, 0).tensorMaps = {{1, {16, 64}, 32}, {1, {32, 1}, 64}, {2, {4, 256}, 0}};
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
}

TEST(ArtifactTest, ArtifactsBeforeSchema15StillLoad) {
  TestArtifact a = nvptxArtifact();
  a.schemaMinor = 4;
  const Artifact artifact = Artifact::fromBytes(serialize(a), kSource);
  EXPECT_EQ(artifact->kernels()->Get(0)->shared_bytes(), 0u);
  EXPECT_EQ(artifact.entryPoint("decode").steps()->Get(0)->step_as_Launch()->tensor_maps(),
            nullptr);
}

TEST(ArtifactTest, SharedBytesAreForNvptxWithinTheLimit) {
  TestArtifact a = tensorMapArtifact();
  a.kernels[0].sharedBytes = 232449;
  std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_EQ(message, "test.kiln: kernels[0] 'linear_amx_bf16'.shared_bytes 232449: more than "
                     "the 232448 bytes (227 KiB) of dynamic shared memory a block can have on "
                     "sm_90a");
  // The limit is the chip table's: a Blackwell workstation block has 99 KiB.
  a.chip = "sm_120";
  a.kernels[0].sharedBytes = 99 * 1024 + 1;
  EXPECT_CONTAINS_ALL(loadError(a), "shared_bytes 101377: more than the 101376 bytes (99 KiB)",
                      "a block can have on sm_120");
  a.kernels[0].sharedBytes = 99 * 1024;
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a = minimalArtifact();
  a.kernels[1].sharedBytes = 1024;
  EXPECT_EQ(loadError(a), "test.kiln: kernels[1] 'attention_bf16'.shared_bytes 1024: dynamic "
                          "shared memory is for nvptx kernels (the artifact is for x86 "
                          "sapphirerapids)");
}

TEST(ArtifactTest, TensorMapScalarsIndexTheLaunchsMaps) {
  TestArtifact a = tensorMapArtifact();
  launchOf(a, 1, 0).scalars[4].value = 2;
  const std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "entry_points[1] 'decode': steps[0] (launch of 'linear_amx_bf16'",
                      ": scalars[4].value 2: no such tensor map (the launch has 2 tensor_maps)");
  launchOf(a, 1, 0).scalars[4].value = -1;
  EXPECT_CONTAINS_ALL(loadError(a), "scalars[4].value -1: no such tensor map");
  launchOf(a, 1, 0).scalars[4].value = 0;
  launchOf(a, 1, 0).tensorMaps.clear();
  EXPECT_CONTAINS_ALL(loadError(a), "scalars[3].value 1: no such tensor map (the launch has 0 "
                                    "tensor_maps)");
}

TEST(ArtifactTest, TensorMapsAreForNvptx) {
  // An x86 artifact: neither the scalar nor the maps.
  TestArtifact a = minimalArtifact();
  launchOf(a, 1, 1).scalars.push_back({fb::ScalarKind::TensorMap, 0});
  launchOf(a, 1, 1).tensorMaps = {{2, {16, 16}, 0}};
  EXPECT_CONTAINS_ALL(loadError(a), "'decode': steps[1] (launch of 'attention_bf16'",
                      ": scalars[3]: TensorMap scalars are for nvptx kernels (the artifact is "
                      "for x86 sapphirerapids)");
  launchOf(a, 1, 1).scalars.pop_back();
  EXPECT_CONTAINS_ALL(loadError(a), ".tensor_maps: tensor maps are for nvptx kernels");
}

TEST(ArtifactTest, TensorMapsNameABufferTheyCanMap) {
  TestArtifact a = tensorMapArtifact();
  auto &maps = launchOf(a, 1, 0).tensorMaps;
  maps[1].buffer = 3;
  std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "'decode': steps[0] (launch of 'linear_amx_bf16'",
                      ": tensor_maps[1].buffer 3: out of range (the launch has 3 buffers)");
  // The attention launch's token ids: I32.
  a = tensorMapArtifact();
  launchOf(a, 1, 1).tensorMaps = {{0, {4}, 0}};
  EXPECT_CONTAINS_ALL(loadError(a), "steps[1] (launch of 'attention_bf16'",
                      ": tensor_maps[0]: buffers[0] is I32; tensor maps take BF16, F16 or F32 "
                      "buffers");
  // x as six dimensions (the same bytes).
  a = tensorMapArtifact();
  launchOf(a, 1, 0).buffers[0].shape = {tokens(16), fixed(2), fixed(2),
                                        fixed(2),   fixed(2), fixed(8)};
  launchOf(a, 1, 0).tensorMaps[1].box = {8, 1, 1, 1, 1, 16};
  EXPECT_CONTAINS_ALL(loadError(a), ": tensor_maps[1]: buffers[0] has rank 6; tensor maps take "
                                    "ranks 1..5");
}

TEST(ArtifactTest, TensorMapBoxes) {
  auto error = [](std::vector<uint32_t> box, uint8_t swizzle) {
    TestArtifact a = tensorMapArtifact();
    launchOf(a, 1, 0).tensorMaps[0] = {1, std::move(box), swizzle};
    const std::string message = loadError(a);
    expectOneLine(message);
    return message;
  };
  EXPECT_CONTAINS_ALL(error({64}, 0), ": tensor_maps[0].box: 1 entries for a rank-2 buffer "
                                      "(one per dimension, innermost first)");
  EXPECT_CONTAINS_ALL(error({64, 64, 1}, 0), ".box: 3 entries for a rank-2 buffer");
  EXPECT_CONTAINS_ALL(error({64, 0}, 0), ": tensor_maps[0].box[1] 0: must be 1..256 elements");
  EXPECT_CONTAINS_ALL(error({264, 8}, 0), ": tensor_maps[0].box[0] 264: must be 1..256 elements");
  EXPECT_CONTAINS_ALL(error({4, 64}, 0), ": tensor_maps[0].box[0]: the box's rows are 8 bytes "
                                         "(4 BF16), not a multiple of 16");
  EXPECT_CONTAINS_ALL(error({12, 64}, 0), "the box's rows are 24 bytes (12 BF16), not a multiple "
                                          "of 16");
  EXPECT_CONTAINS_ALL(error({64, 64}, 16), ": tensor_maps[0].swizzle 16: must be 0 (none), 32, 64 "
                                           "or 128 (bytes)");
  EXPECT_CONTAINS_ALL(error({128, 64}, 128), ": tensor_maps[0].swizzle 128: the box's rows are "
                                             "256 bytes (128 BF16), more than the swizzle span");
  EXPECT_CONTAINS_ALL(error({32, 64}, 32), "swizzle 32: the box's rows are 64 bytes");
  // Without a swizzle the rows may be as long as the box allows.
  TestArtifact a = tensorMapArtifact();
  launchOf(a, 1, 0).tensorMaps[0] = {1, {128, 64}, 0};
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
}

// ---------------------------------------------------------------------------
// Buffers.

TEST(ArtifactTest, ArenaOverflow) {
  TestArtifact a = minimalArtifact();
  a.entryPoints[0].arenaBytes -= 1;
  const std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "entry_points[0] 'prefill': steps[0]", "buffers[2]", "ends at 16384",
                      "past arena_bytes 16383");

  // Rows rounded up to 16: decode (T = 1) still needs 16 rows.
  a = minimalArtifact();
  a.entryPoints[1].arenaBytes = 256 * 2;
  EXPECT_CONTAINS_ALL(loadError(a), "'decode'", "past arena_bytes 512");
}

TEST(ArtifactTest, WeightIndexOutOfRange) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 0).buffers[1].index = 1;
  const std::string message = loadError(a);
  expectOneLine(message);
  EXPECT_CONTAINS_ALL(message, "buffers[1].index: Weight index 1 out of range", "1 weights");
}

TEST(ArtifactTest, WeightReadPastItsBytes) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 0).buffers[1].offset = 2;
  EXPECT_CONTAINS_ALL(loadError(a), "reads bytes 2..16386 of weights[0]", "16384 bytes");
}

TEST(ArtifactTest, OtherBufferIndicesAndTypes) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 1).buffers[4].index = 2; // one cache: K 0, V 1
  EXPECT_CONTAINS_ALL(loadError(a), "KvCache index 2 out of range");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[3].dtype = fb::DType::F16;
  EXPECT_CONTAINS_ALL(loadError(a), "KV cache 0 is [slots, 2, 16] BF16");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[3].shape[1] = fixed(4);
  EXPECT_CONTAINS_ALL(loadError(a), "KV cache 0 is [slots, 2, 16] BF16");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[1].index = 2;
  EXPECT_CONTAINS_ALL(loadError(a), "Input index 2 out of range");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[0].dtype = fb::DType::I64;
  EXPECT_CONTAINS_ALL(loadError(a), "inputs are rank-1 I32");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[5].index = 1;
  EXPECT_CONTAINS_ALL(loadError(a), "Output index 1 out of range");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[5].kind = static_cast<fb::BufferKind>(6);
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[5].kind: unknown buffer kind 6");
  a = minimalArtifact();
  launchOf(a, 0, 1).buffers[5].kind = fb::BufferKind::Exchange;
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[5].index: Exchange names comm group 0, but the "
                                    "artifact has 0");
}

TEST(ArtifactTest, BufferShapesAndDtypes) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 0).buffers[0].shape.clear();
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[0].shape: rank 0");
  a = minimalArtifact();
  launchOf(a, 0, 0).buffers[0].shape[0] = fb::Dim(0, 1, 0);
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[0].shape[0]", "align >= 1");
  a = minimalArtifact();
  launchOf(a, 0, 0).buffers[0].shape[1] = fb::Dim(-128, 0, 1);
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[0].shape[1]");
  a = minimalArtifact();
  launchOf(a, 0, 0).buffers[0].shape[1] = fb::Dim(INT64_MAX / 2, 0, 1);
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[0]: size overflows");
  a = minimalArtifact();
  launchOf(a, 0, 0).buffers[0].dtype = static_cast<fb::DType>(15);
  EXPECT_CONTAINS_ALL(loadError(a), "buffers[0].dtype: unknown dtype 15");
  a = minimalArtifact();
  launchOf(a, 0, 0).buffers[2].offset = 8194; // inside, but not F32-aligned
  a.entryPoints[0].arenaBytes += 4;
  EXPECT_CONTAINS_ALL(loadError(a), "offset 8194: not aligned");
}

TEST(ArtifactTest, CopiesKeepTheirSize) {
  TestArtifact a = minimalArtifact();
  auto &copy = std::get<TestCopy>(a.entryPoints[0].steps[2]);
  copy.destination.shape[1] = fixed(64);
  EXPECT_CONTAINS_ALL(loadError(a), "steps[2] (copy)",
                      "source and destination differ in size at T=1", "4096 and 2048 bytes");
}

TEST(ArtifactTest, CollectivesNeedSeveralRanks) {
  TestArtifact a = minimalArtifact();
  const TestBuffer y = launchOf(a, 0, 0).buffers[2];
  a.entryPoints[0].steps.push_back(TestCollective{fb::CollectiveKind::AllReduce, y, y, 0, 0});
  EXPECT_CONTAINS_ALL(loadError(a), "steps[3] (collective)", "single-rank artifact");
  a.tp = a.world = 2;
  EXPECT_CONTAINS_ALL(loadError(a), ".comm_group: comm group 0 does not exist",
                      "rebuild with this kilnc");
}

// ---------------------------------------------------------------------------
// Weights, KV caches, layout, entry points.

TEST(ArtifactTest, BadAmxTransformShape) {
  TestArtifact a = minimalArtifact();
  a.weights[0].shape = {64, 112};
  a.weights[0].bytes = 64 * 112 * 2;
  launchOf(a, 0, 0).buffers[1].shape[1] = fixed(112);
  EXPECT_EQ(loadError(a), "test.kiln: weights[0] 'model.layers.0.mlp.up_proj.weight'."
                          "transform: VnniBf16 needs N % 16 == 0 and K % 32 == 0 (the "
                          "[N, K] piece is [64, 112])");

  a = minimalArtifact();
  a.weights[0].shape = {72, 128};
  a.weights[0].bytes = 72 * 128 * 2;
  EXPECT_CONTAINS_ALL(loadError(a), "VnniBf16 needs N % 16 == 0");

  a = minimalArtifact(); // each TP piece must be whole blocks too
  a.weights[0].sliceDim = 0;
  a.weights[0].sliceCount = 8;
  a.weights[0].bytes /= 8;
  launchOf(a, 0, 0).buffers[1].shape[0] = fixed(8);
  EXPECT_CONTAINS_ALL(loadError(a), "piece is [8, 128]");

  a = minimalArtifact();
  a.weights[0].dtype = fb::DType::F32;
  a.weights[0].bytes *= 2;
  EXPECT_CONTAINS_ALL(loadError(a), "VnniBf16 needs a rank-2 BF16 tensor (it is rank 2 "
                                    "F32)");

  a = minimalArtifact();
  a.weights[0].shape = {2, 64, 128};
  a.weights[0].bytes *= 2;
  EXPECT_CONTAINS_ALL(loadError(a), "(it is rank 3 BF16)");
}

TEST(ArtifactTest, WeightBindingFields) {
  TestArtifact a = minimalArtifact();
  a.weights[0].name = "";
  EXPECT_EQ(loadError(a), "test.kiln: weights[0].name: empty");
  a = minimalArtifact();
  a.weights[0].dtype = static_cast<fb::DType>(200);
  EXPECT_CONTAINS_ALL(loadError(a), ".dtype: unknown dtype 200");
  a = minimalArtifact();
  a.weights[0].shape[0] = -64;
  EXPECT_CONTAINS_ALL(loadError(a), ".shape[0]: negative (-64)");
  a = minimalArtifact();
  a.weights[0].sliceDim = 2;
  a.weights[0].sliceCount = 2;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_dim 2 is not a dimension");
  a = minimalArtifact();
  a.weights[0].sliceDim = 1;
  a.weights[0].sliceCount = 3;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_count 3 does not divide");
  a = minimalArtifact();
  a.weights[0].sliceDim = 1;
  a.weights[0].sliceCount = 0;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_count 0 does not divide");
  a = minimalArtifact();
  a.weights[0].sliceCount = 2;
  EXPECT_CONTAINS_ALL(loadError(a), ".slice_count: 2 without a slice_dim");
  a = minimalArtifact();
  a.weights[0].bytes = 100;
  EXPECT_CONTAINS_ALL(loadError(a), ".bytes 100 does not match", "(16384 bytes)");
  a = minimalArtifact();
  a.weights[0].transform = static_cast<fb::WeightTransform>(2);
  EXPECT_CONTAINS_ALL(loadError(a), ".transform: unknown transform 2");
}

TEST(ArtifactTest, KvCacheFields) {
  TestArtifact a = minimalArtifact();
  a.kvCaches[0].kvHeads = 0;
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[0]: kv_heads and head_dim");
  a = minimalArtifact();
  a.kvCaches[0].dtype = static_cast<fb::DType>(99);
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[0].dtype: unknown dtype 99");
}

// A sliding ring holds its window and at most the verify entry's rollback
// beyond it; a global layer has none.
TEST(ArtifactTest, KvCacheRing) {
  TestArtifact a = minimalArtifact();
  a.kvCaches.push_back({1, 8, 2, 16, fb::DType::BF16, 8});
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.kvCaches[1].ring = 7;
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[1].ring: 7 slots for window 8 (expected 0 for a "
                                    "global layer, else the window plus at most the verify "
                                    "entry's tokens - 1, 0)");
  a.kvCaches[1].ring = 11; // three more: no verify entry to roll back
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[1].ring: 11 slots for window 8");
  TestEntryPoint verify = a.entryPoints[0];
  verify.name = "verify";
  verify.maxTokens = 4;
  a.entryPoints.push_back(verify);
  // A verify entry writes every token's logits.
  EXPECT_CONTAINS_ALL(loadError(a), "'verify': a verify entry must write every token's logits");
  a.entryPoints.back().logitsRows = tokens();
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.kvCaches[1].ring = 12;
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[1].ring: 12 slots for window 8", "tokens - 1, 3)");
  a.kvCaches[1].ring = 11;
  a.kvCaches[0].ring = 4;
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[0].ring: 4 slots for window 0");
  // The memory plan counts the ring.
  a.kvCaches[0].ring = 0;
  EXPECT_EQ(artifactMemory(Artifact::fromBytes(serialize(a), kSource)).slidingKvBytes,
            11u * 2 * 2 * 16 * 2);
}

// Pages: global caches only, a power of two from 16 to 4096, one for all;
// the page table (input 2) only where the caches are paged.
TEST(ArtifactTest, KvCachePages) {
  TestArtifact a = minimalArtifact();
  launchOf(a, 0, 1).buffers[1].index = 2; // the page table
  EXPECT_CONTAINS_ALL(loadError(a), "Input index 2 out of range",
                      "2: the page table where the KV caches are paged");
  a.kvCaches[0].pageTokens = 64;
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.kvCaches.push_back({1, 8, 2, 16, fb::DType::BF16, 0, 64});
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[1].page_tokens: 64 (expected 0, or for a global "
                                    "layer a power of two from 16 to 4096)");
  a.kvCaches[1] = {1, 0, 2, 16, fb::DType::BF16, 0, 128};
  EXPECT_CONTAINS_ALL(loadError(a), "kv_caches[1].page_tokens: 128, but an earlier global cache "
                                    "has pages of 64");
  a.kvCaches.pop_back();
  for (uint32_t page : {8u, 48u, 8192u}) {
    a.kvCaches[0].pageTokens = page;
    const std::string expected = "kv_caches[0].page_tokens: " + std::to_string(page) + " (";
    EXPECT_CONTAINS_ALL(loadError(a), expected.c_str());
  }
}

TEST(ArtifactTest, LayoutAndRank) {
  TestArtifact a = minimalArtifact();
  a.tp = 2; // world stays 1
  EXPECT_EQ(loadError(a), "test.kiln: layout.world must be max(tp, ep) (tp "
                          "2, ep 1, world 1)");
  a = minimalArtifact();
  a.tp = a.world = 0;
  EXPECT_CONTAINS_ALL(loadError(a), "layout: tp and ep must be >= 1");
  a = minimalArtifact();
  a.ep = a.world = 4;
  a.rank = 4;
  EXPECT_EQ(loadError(a), "test.kiln: rank 4 is not below layout.world 4");
  a.rank = 3;
  EXPECT_NO_THROW(Artifact::fromBytes(serialize(a), kSource));
  a.rank = -1;
  EXPECT_CONTAINS_ALL(loadError(a), "rank -1 is not below");
}

TEST(ArtifactTest, EntryPointFields) {
  TestArtifact a = minimalArtifact();
  a.entryPoints[1].name = "prefill";
  EXPECT_EQ(loadError(a), "test.kiln: entry_points[1] 'prefill'.name: duplicated");
  a = minimalArtifact();
  a.entryPoints[0].name = "";
  EXPECT_EQ(loadError(a), "test.kiln: entry_points[0].name: empty");
  a = minimalArtifact();
  a.entryPoints[1].maxTokens = 0;
  EXPECT_EQ(loadError(a), "test.kiln: entry_points[1] 'decode'.max_tokens: must be >= 1");
  a = minimalArtifact();
  a.entryPoints[1].logitsRows = fb::Dim(1, 0, 0);
  EXPECT_CONTAINS_ALL(loadError(a), "'decode'.logits_rows");
}

// ---------------------------------------------------------------------------
// Helpers.

TEST(ArtifactTest, EvaluateAndBufferBytes) {
  EXPECT_EQ(evaluate(fb::Dim(128, 0, 1), 7), 128);
  EXPECT_EQ(evaluate(fb::Dim(0, 1, 16), 1), 16);
  EXPECT_EQ(evaluate(fb::Dim(0, 1, 16), 16), 16);
  EXPECT_EQ(evaluate(fb::Dim(0, 1, 16), 17), 32);
  EXPECT_EQ(evaluate(fb::Dim(3, 2, 4), 5), 16); // 13 -> 16
  EXPECT_THROW(evaluate(fb::Dim(0, 1, 0), 1), ArtifactError);
  EXPECT_THROW(evaluate(fb::Dim(0, INT64_MAX, 1), 2), ArtifactError);
  EXPECT_THROW(evaluate(fb::Dim(INT64_MAX, 0, 2), 0), ArtifactError);

  const Artifact artifact = Artifact::fromBytes(minimalArtifactBytes(), kSource);
  const fb::Launch &linear = *artifact.entryPoint("prefill").steps()->Get(0)->step_as_Launch();
  const fb::BufferRef &x = *linear.buffers()->Get(0);
  EXPECT_EQ(evaluateShape(x, 20), (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(bufferBytes(x, 1), 16 * 128 * 2);
  EXPECT_EQ(bufferBytes(x, 32), 32 * 128 * 2);
  EXPECT_EQ(bufferBytes(*linear.buffers()->Get(2), 32), 32 * 64 * 4);
}

TEST(ArtifactTest, TargetNames) {
  EXPECT_EQ(targetKindName(fb::TargetKind::AMDGCN), "amdgcn");
  EXPECT_EQ(libraryFormatFor(fb::TargetKind::X86), "elf-shared-object");
  EXPECT_EQ(libraryFormatFor(fb::TargetKind::NVPTX), "ptx");
  EXPECT_EQ(libraryFormatFor(fb::TargetKind::AMDGCN), "hsaco");
}

// ---------------------------------------------------------------------------
// writeFileAtomically.

class ArtifactFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/kiln-artifact-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0755);
    std::error_code error;
    fs::remove_all(dir_, error);
  }

  std::vector<std::string> entries(const std::string &dir) const {
    std::vector<std::string> names;
    for (const auto &entry : fs::directory_iterator(dir))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::vector<uint8_t> readAll(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  }

  std::string dir_;
};

TEST_F(ArtifactFileTest, WritesIdenticalBytesAndNoTemporary) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string path = dir_ + "/model.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());
  EXPECT_EQ(readAll(path), bytes);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"model.kiln"});

  // Replacing keeps one file with the new bytes.
  const std::vector<uint8_t> other = {1, 2, 3};
  writeFileAtomically(path, other.data(), other.size());
  EXPECT_EQ(readAll(path), other);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"model.kiln"});

  writeFileAtomically(path, nullptr, 0);
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_CONTAINS_ALL(errorOf([&] { Artifact::load(path); }),
                      "model.kiln: too small to be a Kiln artifact (0 bytes)");
}

TEST_F(ArtifactFileTest, ReadOnlyDirectoryLeavesNoFile) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string path = dir_ + "/model.kiln";
  auto attempt = [&] {
    return writeErrorOf([&] { writeFileAtomically(path, bytes.data(), bytes.size()); });
  };
  const std::string expected =
      path + ": cannot write: cannot create a temporary file in " + dir_ + ": Permission denied";
  if (::access(dir_.c_str(), W_OK) != 0) {
    EXPECT_EQ(attempt(), expected);
  } else {
    // Privileged (root in a container): try as "nobody" in a child process.
    if (::geteuid() != 0)
      GTEST_SKIP() << "directory modes are not enforced here";
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0)
        ::_exit(3);
      std::string message;
      try {
        writeFileAtomically(path, bytes.data(), bytes.size());
      } catch (const FileWriteError &error) {
        message = error.what();
      }
      ::_exit(message == expected ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong or no error, 3: cannot become nobody";
  }
  EXPECT_TRUE(entries(dir_).empty());
}

TEST_F(ArtifactFileTest, FailedRenameRemovesTheTemporary) {
  // The target is a non-empty directory: the temporary file is written, the
  // rename fails, and nothing but the directory remains.
  const std::string path = dir_ + "/model.kiln";
  fs::create_directories(path + "/inside");
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string expected = path + ": cannot write: cannot rename";
  EXPECT_CONTAINS_ALL(writeErrorOf([&] { writeFileAtomically(path, bytes.data(), bytes.size()); }),
                      expected.c_str());
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"model.kiln"});
  EXPECT_EQ(entries(path), std::vector<std::string>{"inside"});
}

TEST_F(ArtifactFileTest, MissingDirectory) {
  const std::string path = dir_ + "/missing/model.kiln";
  const uint8_t byte = 0;
  EXPECT_CONTAINS_ALL(writeErrorOf([&] { writeFileAtomically(path, &byte, 1); }),
                      "missing/model.kiln: cannot write", "No such file or directory");
  EXPECT_TRUE(entries(dir_).empty());
}

// ---------------------------------------------------------------------------
// kiln-dump.

TEST_F(ArtifactFileTest, KilnDumpPrintsASummary) {
  const std::vector<uint8_t> bytes = minimalArtifactBytes();
  const std::string path = dir_ + "/model.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());

  std::ostringstream out, err;
  ASSERT_EQ(kilnDumpMain({path}, out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
  const std::string summary = out.str();
  EXPECT_NE(
      summary.find("schema 1." + std::to_string(artifact::kSchemaMinor) + ", compiler kilnc test"),
      std::string::npos)
      << summary;
  EXPECT_CONTAINS_ALL(summary, ", compiler kilnc test",
                      "x86, triple x86_64-unknown-linux-gnu, chip sapphirerapids, features "
                      "amx-bf16, avx512bf16",
                      "muse-spark-test, weight format bf16", "tp 1, ep 1, sp off, world 1\n",
                      "1 binding, 16384 bytes (16.0 KiB)",
                      "1 (1 global, 0 sliding, BF16); K+V bytes per token: 128 global",
                      "2, library elf-shared-object 64 bytes",
                      "[0] linear_amx_bf16  op kiln.linear  tiling {\"kind\":\"amx\"",
                      "prefill: max_tokens 32, arena 16384 bytes (16.0 KiB), logits rows 1\n",
                      "3 steps: 2 launch, 1 copy, 0 collective",
                      "decode: max_tokens 1, arena 8192 bytes");
  EXPECT_EQ(summary.find("steps (shapes"), std::string::npos);
  EXPECT_EQ(summary.find("up_proj.weight  BF16"), std::string::npos);

  out.str("");
  ASSERT_EQ(kilnDumpMain({"--weights", "--steps", path}, out, err), 0);
  EXPECT_CONTAINS_ALL(out.str(),
                      "[0] model.layers.0.mlp.up_proj.weight  BF16[64, 128]  transform "
                      "VnniBf16  16384 bytes",
                      "steps (shapes at T=32):",
                      "[0] launch linear_amx_bf16  op model.layers.0.mlp.up_proj  parts <= 4",
                      "buffers: arena+0 BF16[32, 128], weight[0] "
                      "model.layers.0.mlp.up_proj.weight BF16[64, 128], arena+8192 F32[32, "
                      "64]",
                      "scalars: T, part, parts", "input.tokens I32[32], input.positions I32[32]",
                      "kv[0].K BF16[slots, 2, 16], kv[0].V BF16[slots, 2, 16], "
                      "output.logits F32[1, 64]",
                      "scalars: T, past, 7",
                      "[2] copy arena+8192 F32[32, 64] -> arena+0 BF16[32, 128]",
                      "steps (shapes at T=1):", "arena+0 BF16[16, 128]");
}

TEST_F(ArtifactFileTest, KilnDumpRefusesWhatKilnRunRefuses) {
  TestArtifact a = minimalArtifact();
  a.configJson = R"({"model_type":"muse_spark","max_position_embeddings":8})";
  const std::vector<uint8_t> bytes = serialize(a);
  const std::string path = dir_ + "/no-vocab.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());
  std::ostringstream out, err;
  EXPECT_EQ(kilnDumpMain({path}, out, err), 1);
  EXPECT_CONTAINS_ALL(err.str(), "no-vocab.kiln: model.config_json: field 'vocab_size'");
  EXPECT_EQ(out.str(), "");
}

TEST_F(ArtifactFileTest, KilnDumpPrintsSharedMemoryAndTensorMaps) {
  const std::vector<uint8_t> bytes = serialize(tensorMapArtifact());
  const std::string path = dir_ + "/hopper.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());
  std::ostringstream out, err;
  ASSERT_EQ(kilnDumpMain({path}, out, err), 0) << err.str();
  const std::string summary = out.str();
  EXPECT_CONTAINS_ALL(summary,
                      "[0] linear_amx_bf16  op kiln.linear  tiling {\"kind\":\"amx\",\"m\":16,"
                      "\"n\":16,\"k\":32}  shared 196608 bytes\n",
                      "[1] attention_bf16  op kiln.attention  tiling {}\n");
  EXPECT_EQ(summary.find("tmap("), std::string::npos);

  out.str("");
  ASSERT_EQ(kilnDumpMain({"--steps", path}, out, err), 0) << err.str();
  EXPECT_CONTAINS_ALL(out.str(), "scalars: T, part, parts, tmap(buffer 0, box 8x16, swizzle none), "
                                 "tmap(buffer 1, box 64x64, swizzle 128B)\n");
}

TEST_F(ArtifactFileTest, KilnDumpErrorsAndUsage) {
  std::ostringstream out, err;
  EXPECT_EQ(kilnDumpMain({"--help"}, out, err), 0);
  EXPECT_CONTAINS_ALL(out.str(), "usage: kiln-dump");

  EXPECT_EQ(kilnDumpMain({}, out, err), 2);
  EXPECT_EQ(kilnDumpMain({"--frobnicate", "x.kiln"}, out, err), 2);
  EXPECT_CONTAINS_ALL(err.str(), "unknown option '--frobnicate'");
  EXPECT_EQ(kilnDumpMain({"a.kiln", "b.kiln"}, out, err), 2);

  TestArtifact a = minimalArtifact();
  a.schemaMajor = 9;
  const std::vector<uint8_t> bytes = serialize(a);
  const std::string path = dir_ + "/old.kiln";
  writeFileAtomically(path, bytes.data(), bytes.size());
  err.str("");
  EXPECT_EQ(kilnDumpMain({path}, out, err), 1);
  const std::string message = err.str();
  EXPECT_EQ(message.rfind(path + ": version.schema_major", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), message.size() - 1) << message;
}

} // namespace
} // namespace kiln
