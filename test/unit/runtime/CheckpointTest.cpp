// Checkpoint directories: sharded writing and reading, and every way an index
// and its shards can disagree.
#include "runtime/safetensors/Checkpoint.h"

#include "test/unit/runtime/SafetensorsTestUtil.h"

#include <gtest/gtest.h>

#include <deque>

namespace kiln {
namespace {

using safetensors_test::errorOf;
using safetensors_test::readAll;

class CheckpointTest : public safetensors_test::TempDirTest {
protected:
  // A tensor of U8 [size] whose bytes are derived from its name.
  TensorData tensor(const std::string &name, size_t size) {
    std::string &bytes = storage_.emplace_back(size, '\0');
    for (size_t i = 0; i < size; ++i)
      bytes[i] = static_cast<char>(name.size() * 31 + name[0] + i);
    return {name,
            DType::U8,
            {static_cast<int64_t>(size)},
            {reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()}};
  }

  // Writes a shard holding the named 4-byte tensors into checkpoint dir "c".
  void writeShard(const std::string &file, const std::vector<std::string> &names) {
    std::filesystem::create_directories(path("c"));
    std::vector<TensorData> tensors;
    for (const std::string &name : names)
      tensors.push_back(tensor(name, 4));
    writeSafetensors(path("c/" + file), tensors);
  }
  void writeIndex(const std::string &text) { writeFile("c/model.safetensors.index.json", text); }
  std::string openError() {
    return errorOf([&] { Checkpoint::open(path("c")); });
  }

  std::deque<std::string> storage_; // stable addresses for the views
};

std::string toString(ByteView bytes) { return std::string(bytes.begin(), bytes.end()); }

TEST(ShardFileName, IsFiveDigitOneBased) {
  EXPECT_EQ(shardFileName(1, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(shardFileName(12, 163), "model-00012-of-00163.safetensors");
}

TEST_F(CheckpointTest, ShardedRoundTrip) {
  const std::vector<TensorData> tensors = {tensor("a", 40), tensor("b", 30), tensor("c", 50),
                                           tensor("d", 10), tensor("e", 0)};
  const std::vector<std::string> shards =
      writeShardedCheckpoint(path("ckpt"), tensors, 80, {{"format", "pt"}});
  // a+b = 70; c would make 120, so c starts shard 2, which d and e join.
  EXPECT_EQ(shards, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(listDir("ckpt"), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors",
                                                       "model.safetensors.index.json"}));
  EXPECT_EQ(readAll(path("ckpt/model.safetensors.index.json")),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 130\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"a\": \"model-00001-of-00002.safetensors\",\n"
            "    \"b\": \"model-00001-of-00002.safetensors\",\n"
            "    \"c\": \"model-00002-of-00002.safetensors\",\n"
            "    \"d\": \"model-00002-of-00002.safetensors\",\n"
            "    \"e\": \"model-00002-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");

  Checkpoint checkpoint = Checkpoint::open(path("ckpt"));
  EXPECT_TRUE(checkpoint.isSharded());
  EXPECT_EQ(checkpoint.numTensors(), 5u);
  EXPECT_EQ(checkpoint.totalBytes(), 130u);
  EXPECT_EQ(checkpoint.tensorNames(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  ASSERT_EQ(checkpoint.files().size(), 2u);
  EXPECT_EQ(checkpoint.files()[0].metadata(), (SafetensorsMetadata{{"format", "pt"}}));
  for (const TensorData &expected : tensors) {
    CheckpointTensor found = checkpoint.find(expected.name);
    ASSERT_TRUE(found) << expected.name;
    EXPECT_EQ(found.info->shape, expected.shape);
    EXPECT_EQ(toString(found.bytes), toString(expected.bytes));
  }
  EXPECT_EQ(checkpoint.find("c").file, &checkpoint.files()[1]);
  EXPECT_FALSE(checkpoint.find("zz"));
}

TEST_F(CheckpointTest, OversizedTensorGetsItsOwnShard) {
  const std::vector<std::string> shards = writeShardedCheckpoint(
      path("ckpt"), {tensor("a", 8), tensor("big", 100), tensor("b", 8), tensor("c", 8)}, 16);
  ASSERT_EQ(shards.size(), 3u);
  Checkpoint checkpoint = Checkpoint::open(path("ckpt"));
  EXPECT_EQ(checkpoint.files()[0].tensors().size(), 1u);
  EXPECT_EQ(checkpoint.files()[1].tensors()[0].name, "big");
  EXPECT_EQ(checkpoint.files()[2].tensors().size(), 2u);
}

TEST_F(CheckpointTest, WritingIsDeterministic) {
  const std::vector<TensorData> tensors = {tensor("x.weight", 33), tensor("x.bias", 7),
                                           tensor("y", 64)};
  writeShardedCheckpoint(path("one"), tensors, 40, {{"k", "v"}});
  writeShardedCheckpoint(path("two"), tensors, 40, {{"k", "v"}});
  const std::vector<std::string> files = listDir("one");
  ASSERT_EQ(files, listDir("two"));
  EXPECT_EQ(files.size(), 3u); // 2 shards + index
  for (const std::string &file : files)
    EXPECT_EQ(readAll(path("one/" + file)), readAll(path("two/" + file))) << file;
}

TEST_F(CheckpointTest, FillVariantWritesTheSameBytesWithProgress) {
  const std::vector<TensorData> tensors = {tensor("p", 20), tensor("q", 30), tensor("r", 5)};
  writeShardedCheckpoint(path("data"), tensors, 25);
  std::vector<TensorDecl> decls;
  for (const TensorData &t : tensors)
    decls.push_back({t.name, t.dtype, t.shape});
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  writeShardedCheckpoint(
      path("fill"), decls,
      [&](size_t index, uint8_t *dst) {
        std::copy(tensors[index].bytes.begin(), tensors[index].bytes.end(), dst);
      },
      25, {}, [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
  for (const std::string &file : listDir("data"))
    EXPECT_EQ(readAll(path("data/" + file)), readAll(path("fill/" + file))) << file;
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front(), (std::pair<uint64_t, uint64_t>{0, 55}));
  EXPECT_EQ(progress.back(), (std::pair<uint64_t, uint64_t>{55, 55}));
  for (size_t i = 1; i < progress.size(); ++i)
    EXPECT_GE(progress[i].first, progress[i - 1].first);
}

TEST_F(CheckpointTest, OpensASingleFile) {
  std::filesystem::create_directories(path("c"));
  writeSafetensors(path("c/model.safetensors"), {tensor("w", 12), tensor("v", 3)});
  Checkpoint checkpoint = Checkpoint::open(path("c"));
  EXPECT_FALSE(checkpoint.isSharded());
  EXPECT_EQ(checkpoint.numTensors(), 2u);
  EXPECT_EQ(checkpoint.totalBytes(), 15u);
  EXPECT_EQ(checkpoint.find("v").bytes.size, 3u);
}

TEST_F(CheckpointTest, RejectsInvalidWriterArguments) {
  EXPECT_CONTAINS_ALL(errorOf([&] { writeShardedCheckpoint(path("x"), {tensor("a", 1)}, 0); }),
                      "maxShardBytes");
  // Names must be unique across shards, not just within one.
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeShardedCheckpoint(path("x"), {tensor("a", 4), tensor("a", 4)}, 4);
                      }),
                      "tensor 'a'", "duplicate");
  EXPECT_FALSE(std::filesystem::exists(path("x")));
}

TEST_F(CheckpointTest, RejectsTensorMissingFromItsShard) {
  writeShard("s1.safetensors", {"a"});
  writeIndex(R"({"weight_map": {"a": "s1.safetensors", "x": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "tensor 'x'",
                      "mapped to 's1.safetensors'", "does not contain it");
}

TEST_F(CheckpointTest, RejectsTensorInTheWrongShard) {
  writeShard("s1.safetensors", {"a"});
  writeShard("s2.safetensors", {"b"});
  writeIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
                                "c": "s2.safetensors"}})");
  writeShard("s2.safetensors", {"b", "c"});
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "tensor 'b'",
                      "mapped to 's1.safetensors'", "stored in 's2.safetensors'");
}

TEST_F(CheckpointTest, RejectsTensorMissingFromTheWeightMap) {
  writeShard("s1.safetensors", {"a", "extra"});
  writeIndex(R"({"weight_map": {"a": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "tensor 'extra'",
                      "'s1.safetensors'", "missing from the weight_map");
}

TEST_F(CheckpointTest, RejectsTensorInTwoShards) {
  writeShard("s1.safetensors", {"a", "dup"});
  writeShard("s2.safetensors", {"b", "dup"});
  writeIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors",
                                "dup": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "tensor 'dup'", "both", "'s1.safetensors'", "'s2.safetensors'");
}

TEST_F(CheckpointTest, RejectsShardNamesThatAreNotPlain) {
  writeShard("s1.safetensors", {"a"});
  for (const char *name :
       {"../s1.safetensors", "sub/s1.safetensors", "..", ".", "/etc/passwd", ""}) {
    SCOPED_TRACE(name);
    writeIndex(std::string(R"({"weight_map": {"a": ")") + name + "\"}}");
    EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "tensor 'a'",
                        "not a plain file name");
  }
}

TEST_F(CheckpointTest, RejectsTotalSizeMismatch) {
  writeShard("s1.safetensors", {"a", "b"});
  writeIndex(R"({"metadata": {"total_size": 9},
                 "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "total_size is 9",
                      "hold 8 bytes");
  writeIndex(R"({"metadata": {"total_size": "8"},
                 "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "total_size", "not a non-negative integer");
  // Correct, and written as an integral float by some tools: accepted.
  writeIndex(R"({"metadata": {"total_size": 8.0},
                 "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_EQ(Checkpoint::open(path("c")).numTensors(), 2u);
}

TEST_F(CheckpointTest, RejectsMissingShardFile) {
  writeShard("s1.safetensors", {"a"});
  writeIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "'s2.safetensors'", "tensor 'b'",
                      "is missing");
}

TEST_F(CheckpointTest, RejectsMalformedIndex) {
  writeShard("s1.safetensors", {"a"});
  writeIndex("[]");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "not a JSON object");
  writeIndex(R"({"metadata": {}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "missing 'weight_map'");
  writeIndex(R"({"weight_map": ["a"]})");
  EXPECT_CONTAINS_ALL(openError(), "'weight_map' is not a JSON object");
  writeIndex(R"({"weight_map": {"a": 1}})");
  EXPECT_CONTAINS_ALL(openError(), "tensor 'a'", "is not a string");
  writeIndex(R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "duplicate key 'a'",
                      "'weight_map'");
  writeIndex(R"({"weight_map": {"a": "s1.safetensors"})");
  EXPECT_CONTAINS_ALL(openError(), "model.safetensors.index.json", "not valid JSON at byte");
}

TEST_F(CheckpointTest, RejectsAmbiguousOrEmptyDirectories) {
  std::filesystem::create_directories(path("c"));
  EXPECT_CONTAINS_ALL(openError(), "neither");
  writeShard("model.safetensors", {"a"});
  writeIndex(R"({"weight_map": {"a": "model.safetensors"}})");
  EXPECT_CONTAINS_ALL(openError(), "both");
  EXPECT_CONTAINS_ALL(errorOf([&] { Checkpoint::open(path("nope")); }),
                      "not a checkpoint directory");
}

} // namespace
} // namespace kiln
