// The safetensors writer: deterministic sorted, padded headers; bytes laid
// out in the given order; atomic replacement; input validation.
#include "runtime/safetensors/SafetensorsWriter.h"

#include "test/unit/runtime/SafetensorsTestUtil.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kiln {
namespace {

using safetensors_test::errorOf;
using safetensors_test::readAll;

class SafetensorsWriterTest : public safetensors_test::TempDirTest {};

ByteView view(const std::string &bytes) {
  return {reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()};
}

std::string iota(size_t size, uint8_t start) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<char>(start + i);
  return bytes;
}

std::string toString(ByteView bytes) { return std::string(bytes.begin(), bytes.end()); }

TEST_F(SafetensorsWriterTest, WritesTheExpectedBytes) {
  const std::string b = iota(8, 0x10), a = iota(3, 0x40);
  writeSafetensors(path("g.safetensors"),
                   {{"b", DType::F32, {2}, view(b)}, {"a", DType::U8, {3}, view(a)}},
                   {{"format", "pt"}});
  // Keys sorted with __metadata__ first; data in the given order (b, then a).
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(readAll(path("g.safetensors")), safetensors_test::fileImage(header, b + a));
}

TEST_F(SafetensorsWriterTest, RoundTrips) {
  const std::string w = iota(24, 1), s = iota(2, 100), e;
  writeSafetensors(path("rt.safetensors"),
                   {{"model.layers.0.w", DType::BF16, {3, 4}, view(w)},
                    {"empty", DType::F32, {0, 5}, view(e)},
                    {"scale", DType::F16, {}, view(s)}},
                   {{"z", "last"}, {"a", "first"}});
  SafetensorsFile st = SafetensorsFile::open(path("rt.safetensors"));
  EXPECT_EQ(st.dataOffset() % 8, 0u);
  ASSERT_EQ(st.tensors().size(), 3u);
  EXPECT_EQ(st.tensors()[0].name, "model.layers.0.w"); // given order on disk
  EXPECT_EQ(st.tensors()[2].name, "scale");
  EXPECT_EQ(toString(st.bytes("model.layers.0.w")), w);
  EXPECT_EQ(toString(st.bytes("scale")), s);
  EXPECT_EQ(st.bytes("empty").size, 0u);
  EXPECT_EQ(st.find("model.layers.0.w")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(st.find("scale")->dtype, DType::F16);
  EXPECT_TRUE(st.find("scale")->shape.empty());
  EXPECT_EQ(st.metadata(), (SafetensorsMetadata{{"a", "first"}, {"z", "last"}}));

  // The header text lists __metadata__ first, then names in sorted order.
  const std::string file = readAll(path("rt.safetensors"));
  const std::string header = file.substr(8, st.dataOffset() - 8);
  const size_t meta = header.find("\"__metadata__\""), empty = header.find("\"empty\""),
               weight = header.find("\"model.layers.0.w\""), scale = header.find("\"scale\"");
  EXPECT_EQ(meta, 1u);
  EXPECT_LT(meta, empty);
  EXPECT_LT(empty, weight);
  EXPECT_LT(weight, scale);
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
}

TEST_F(SafetensorsWriterTest, TwoWritesAreByteIdentical) {
  const std::string x = iota(5, 7), y = iota(16, 9);
  for (const char *name : {"one.safetensors", "two.safetensors"})
    writeSafetensors(path(name),
                     {{"y", DType::I32, {2, 2}, view(y)}, {"x", DType::I8, {5}, view(x)}},
                     {{"format", "pt"}, {"source", "kiln"}});
  EXPECT_EQ(readAll(path("one.safetensors")), readAll(path("two.safetensors")));
  EXPECT_EQ(listDir(), (std::vector<std::string>{"one.safetensors", "two.safetensors"}));
}

TEST_F(SafetensorsWriterTest, EscapesNames) {
  const std::string name = "quote\" back\\slash\nnewline \xc3\xa9";
  writeSafetensors(path("esc.safetensors"), {{name, DType::U8, {1}, view("!")}});
  SafetensorsFile st = SafetensorsFile::open(path("esc.safetensors"));
  ASSERT_NE(st.find(name), nullptr);
  EXPECT_EQ(toString(st.bytes(name)), "!");
}

TEST_F(SafetensorsWriterTest, WritesAnEmptyFile) {
  writeSafetensors(path("none.safetensors"), std::vector<TensorData>{});
  EXPECT_EQ(readAll(path("none.safetensors")), safetensors_test::fileImage("{}      "));
  EXPECT_TRUE(SafetensorsFile::open(path("none.safetensors")).tensors().empty());
}

TEST_F(SafetensorsWriterTest, FailedWriteLeavesNoFile) {
  auto failingFill = [](size_t index, uint8_t *dst) {
    if (index == 1)
      throw std::runtime_error("source went away");
    std::fill(dst, dst + 4, 0xAB);
  };
  const std::vector<TensorDecl> decls = {{"a", DType::F32, {1}}, {"b", DType::F32, {1}}};
  EXPECT_THROW(writeSafetensors(path("f.safetensors"), decls, failingFill), std::runtime_error);
  EXPECT_TRUE(listDir().empty()); // neither the file nor a .tmp

  // An existing file survives a failed rewrite unchanged.
  writeSafetensors(path("f.safetensors"), {{"old", DType::U8, {2}, view("ok")}});
  const std::string before = readAll(path("f.safetensors"));
  EXPECT_THROW(writeSafetensors(path("f.safetensors"), decls, failingFill), std::runtime_error);
  EXPECT_EQ(readAll(path("f.safetensors")), before);
  EXPECT_EQ(listDir(), (std::vector<std::string>{"f.safetensors"}));
}

TEST_F(SafetensorsWriterTest, FailsInAMissingDirectory) {
  EXPECT_CONTAINS_ALL(
      errorOf([&] {
        writeSafetensors(path("no/such/x.safetensors"), {{"a", DType::U8, {1}, view("a")}});
      }),
      "no/such/x.safetensors", "cannot create");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsWriterTest, FailedRenameRemovesTheTemporary) {
  // The target is a non-empty directory: everything works but the rename.
  std::filesystem::create_directories(path("target/inner"));
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(path("target"), {{"a", DType::U8, {1}, view("a")}});
                      }),
                      "target", "rename");
  EXPECT_EQ(listDir(), (std::vector<std::string>{"target"}));
}

TEST_F(SafetensorsWriterTest, RejectsByteCountMismatch) {
  EXPECT_CONTAINS_ALL(
      errorOf([&] {
        writeSafetensors(path("m.safetensors"),
                         {{"ok", DType::U8, {1}, view("a")}, {"w", DType::F32, {2}, view("1234")}});
      }),
      "m.safetensors", "tensor 'w'", "got 4 bytes", "need 8");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsWriterTest, RejectsBadDeclarations) {
  const std::string file = path("d.safetensors");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(file, {{"w", DType::U8, {1}, view("a")},
                                                {"w", DType::U8, {1}, view("b")}});
                      }),
                      "d.safetensors", "tensor 'w'", "duplicate");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(file, {{"__metadata__", DType::U8, {1}, view("a")}});
                      }),
                      "d.safetensors", "'__metadata__'", "reserved");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(file, {{"n", DType::U8, {-1}, view("")}});
                      }),
                      "d.safetensors", "tensor 'n'", "negative dimension");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(file, {{"o", DType::F64, {1ll << 62}, view("")}});
                      }),
                      "d.safetensors", "tensor 'o'", "overflows");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        writeSafetensors(file, {{"bad\xff", DType::U8, {1}, view("a")}});
                      }),
                      "d.safetensors", "not valid UTF-8");
  EXPECT_CONTAINS_ALL(
      errorOf([&] {
        writeSafetensors(file, {{"a", DType::U8, {1}, view("a")}}, {{"k", "bad\xff"}});
      }),
      "d.safetensors", "metadata value of 'k'", "not valid UTF-8");
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsWriterTest, StreamsInPieces) {
  const std::string a = iota(10, 0), b = iota(6, 50);
  const std::string all = a + b;
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  {
    SafetensorsWriter writer(
        path("s.safetensors"), {{"a", DType::U16, {5}}, {"b", DType::U8, {2, 3}}}, {},
        [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
    EXPECT_EQ(writer.dataSize(), 16u);
    // Pieces that straddle the tensor boundary are fine.
    writer.append(all.data(), 3);
    writer.append(all.data() + 3, 9);
    EXPECT_TRUE(listDir().size() == 1 && listDir()[0].find(".tmp.") != std::string::npos);
    writer.append(all.data() + 12, 4);
    writer.finish();
  }
  SafetensorsFile st = SafetensorsFile::open(path("s.safetensors"));
  EXPECT_EQ(toString(st.bytes("a")), a);
  EXPECT_EQ(toString(st.bytes("b")), b);
  EXPECT_EQ(progress, (std::vector<std::pair<uint64_t, uint64_t>>{{3, 16}, {12, 16}, {16, 16}}));
  EXPECT_EQ(listDir(), (std::vector<std::string>{"s.safetensors"}));
}

TEST_F(SafetensorsWriterTest, StreamingChecksByteCounts) {
  {
    SafetensorsWriter writer(path("s.safetensors"), {{"a", DType::U8, {2}}, {"b", DType::U8, {4}}});
    writer.append("abc", 3);
    EXPECT_CONTAINS_ALL(errorOf([&] { writer.finish(); }), "s.safetensors", "tensor 'b'",
                        "incomplete", "1 of 4 bytes");
  }
  EXPECT_TRUE(listDir().empty());
  {
    SafetensorsWriter writer(path("s.safetensors"), {{"a", DType::U8, {2}}});
    EXPECT_CONTAINS_ALL(errorOf([&] { writer.append("abc", 3); }), "s.safetensors",
                        "more tensor bytes than declared");
    EXPECT_CONTAINS_ALL(errorOf([&] { writer.append("a", 1); }), "failed");
  }
  EXPECT_TRUE(listDir().empty());
  {
    // Abandoned without finish(): nothing stays behind.
    SafetensorsWriter writer(path("s.safetensors"), {{"a", DType::U8, {2}}});
    writer.append("ab", 2);
  }
  EXPECT_TRUE(listDir().empty());
}

TEST_F(SafetensorsWriterTest, FillCallbackRoundTripsWithProgress) {
  const std::vector<TensorDecl> decls = {
      {"x", DType::F32, {3, 5}}, {"y", DType::U8, {0}}, {"z", DType::I64, {2}}};
  std::vector<size_t> filled;
  uint64_t lastDone = 0, lastTotal = 0;
  writeSafetensors(
      path("cb.safetensors"), decls,
      [&](size_t index, uint8_t *dst) {
        filled.push_back(index);
        const uint64_t size = tensorByteSize(decls[index].dtype, decls[index].shape);
        for (uint64_t i = 0; i < size; ++i)
          dst[i] = static_cast<uint8_t>(index * 16 + i);
      },
      {},
      [&](uint64_t done, uint64_t total) {
        EXPECT_GE(done, lastDone);
        lastDone = done;
        lastTotal = total;
      });
  EXPECT_EQ(filled, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(lastDone, 76u);
  EXPECT_EQ(lastTotal, 76u);
  SafetensorsFile st = SafetensorsFile::open(path("cb.safetensors"));
  EXPECT_EQ(static_cast<int>(st.bytes("z").data[3]), 2 * 16 + 3);
  EXPECT_EQ(st.bytes("x").size, 60u);
}

} // namespace
} // namespace kiln
