// The safetensors reader: every rule of the format is enforced with a message
// that names the file and the tensor or field at fault, and every valid
// corner (zero-size and rank-0 tensors, padded headers, all dtypes) is read.
#include "runtime/safetensors/SafetensorsFile.h"

#include "test/unit/runtime/SafetensorsTestUtil.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using safetensors_test::errorOf;
using safetensors_test::fileImage;
using safetensors_test::littleEndian64;

class SafetensorsReader : public safetensors_test::TempDirTest {
protected:
  // Writes the image as bad.safetensors and returns the open error.
  std::string openError(const std::string &image) {
    const std::string file = writeFile("bad.safetensors", image);
    return errorOf([&] { SafetensorsFile::open(file); });
  }
  // The error for a file with this header and `dataSize` bytes of data.
  std::string headerError(const std::string &header, size_t dataSize = 0) {
    return openError(fileImage(header, std::string(dataSize, '\x5a')));
  }
};

std::string entry(const std::string &dtype, const std::string &shape, const std::string &offsets) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

//===----------------------------------------------------------------------===//
// Rejections
//===----------------------------------------------------------------------===//

TEST_F(SafetensorsReader, RejectsFileShorterThan8Bytes) {
  EXPECT_CONTAINS_ALL(openError(std::string("\x02\0\0", 3)), "bad.safetensors", "3 bytes",
                      "shorter than");
  EXPECT_CONTAINS_ALL(openError(""), "bad.safetensors", "0 bytes");
}

TEST_F(SafetensorsReader, RejectsHeaderLengthBeyondFile) {
  EXPECT_CONTAINS_ALL(openError(littleEndian64(1000) + "{}"), "bad.safetensors",
                      "header length 1000", "larger than the file");
  // All 64 bits set: must not wrap around in the size arithmetic.
  EXPECT_CONTAINS_ALL(openError(littleEndian64(~uint64_t{0}) + "{}"), "bad.safetensors",
                      "header length");
}

TEST_F(SafetensorsReader, RejectsHeaderOver100MB) {
  EXPECT_CONTAINS_ALL(openError(littleEndian64(100'000'001) + "{}      "), "bad.safetensors",
                      "header length 100000001", "exceeds the limit of 100000000");
}

TEST_F(SafetensorsReader, RejectsInvalidUtf8Header) {
  const std::string good = entry("U8", "[1]", "[0,1]");
  for (const std::string &name : {std::string("w\xff"), std::string("w\xc0\xaf"), // overlong '/'
                                  std::string("w\xed\xa0\x80"),                   // surrogate
                                  std::string("w\xf4\x90\x80\x80"),               // above U+10FFFF
                                  std::string("w\xe2\x82")})                      // cut short
    EXPECT_CONTAINS_ALL(headerError("{\"" + name + "\":" + good + "}", 1), "bad.safetensors",
                        "not valid UTF-8");
}

TEST_F(SafetensorsReader, RejectsHeaderThatIsNotAnObject) {
  EXPECT_CONTAINS_ALL(headerError("[1,2]"), "bad.safetensors", "not a JSON object");
  EXPECT_CONTAINS_ALL(headerError("\"text\""), "bad.safetensors", "not a JSON object");
  EXPECT_CONTAINS_ALL(headerError(""), "bad.safetensors", "not a JSON object");
}

TEST_F(SafetensorsReader, RejectsJsonParseError) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":"), "bad.safetensors", "not valid JSON at byte");
  EXPECT_CONTAINS_ALL(headerError("{} x"), "bad.safetensors", "not valid JSON at byte");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":\"U8\",}}"), "bad.safetensors",
                      "not valid JSON at byte");
}

TEST_F(SafetensorsReader, RejectsEntryThatIsNotAnObject) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":[1,2]}"), "bad.safetensors", "tensor 'w'",
                      "not a JSON object");
}

TEST_F(SafetensorsReader, RejectsMissingFields) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"shape\":[2],\"data_offsets\":[0,2]}}", 2),
                      "bad.safetensors", "tensor 'w'", "missing 'dtype'");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,2]}}", 2),
                      "bad.safetensors", "tensor 'w'", "missing 'shape'");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":\"U8\",\"shape\":[2]}}", 2), "bad.safetensors",
                      "tensor 'w'", "missing 'data_offsets'");
}

TEST_F(SafetensorsReader, RejectsWrongTypedDtype) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,2]}}", 2),
                      "bad.safetensors", "tensor 'w'", "'dtype' is not a string");
}

TEST_F(SafetensorsReader, RejectsWrongTypedShape) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "\"2\"", "[0,2]") + "}", 2),
                      "bad.safetensors", "tensor 'w'", "'shape' is not an array");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[2.0]", "[0,2]") + "}", 2),
                      "bad.safetensors", "tensor 'w'", "'shape' has a non-integer");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[true]", "[0,1]") + "}", 1),
                      "bad.safetensors", "tensor 'w'", "'shape' has a non-integer");
}

TEST_F(SafetensorsReader, RejectsMalformedDataOffsets) {
  for (const char *offsets : {"[2]", "[0,2,2]", "[-1,1]", "[0,2.0]", "[\"0\",\"2\"]", "{}", "null",
                              "[0,18446744073709551616]"}) {
    SCOPED_TRACE(offsets);
    EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[2]", offsets) + "}", 2),
                        "bad.safetensors", "tensor 'w'",
                        "'data_offsets' must be an array of two non-negative");
  }
}

TEST_F(SafetensorsReader, RejectsDataOffsetsBeginAfterEnd) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[2]", "[2,0]") + "}", 2),
                      "bad.safetensors", "tensor 'w'", "begin 2 is greater than end 0");
}

TEST_F(SafetensorsReader, RejectsUnknownField) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
                                  "\"scale\":1}}",
                                  1),
                      "bad.safetensors", "tensor 'w'", "unknown field 'scale'");
}

TEST_F(SafetensorsReader, RejectsMetadataThatIsNotAnObject) {
  EXPECT_CONTAINS_ALL(headerError("{\"__metadata__\":\"pt\"}"), "bad.safetensors",
                      "'__metadata__' is not a JSON object");
  EXPECT_CONTAINS_ALL(headerError("{\"__metadata__\":[]}"), "bad.safetensors",
                      "'__metadata__' is not a JSON object");
}

TEST_F(SafetensorsReader, RejectsMetadataWithNonStringValue) {
  EXPECT_CONTAINS_ALL(headerError("{\"__metadata__\":{\"format\":\"pt\",\"step\":3}}"),
                      "bad.safetensors", "'__metadata__' value of key 'step' is not a string");
  EXPECT_CONTAINS_ALL(headerError("{\"__metadata__\":{\"n\":null}}"), "bad.safetensors", "'n'",
                      "not a string");
}

TEST_F(SafetensorsReader, RejectsDuplicateTensorNames) {
  // nlohmann would keep the second entry silently.
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[2]", "[0,2]") +
                                      ",\"w\":" + entry("U8", "[2]", "[2,4]") + "}",
                                  4),
                      "bad.safetensors", "duplicate key 'w'");
}

TEST_F(SafetensorsReader, RejectsDuplicateFieldsAndMetadataKeys) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],"
                                  "\"data_offsets\":[0,1]}}",
                                  1),
                      "bad.safetensors", "duplicate key 'dtype'", "'w'");
  EXPECT_CONTAINS_ALL(headerError("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}"),
                      "bad.safetensors", "duplicate key 'a'", "'__metadata__'");
}

TEST_F(SafetensorsReader, RejectsUnknownDtype) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("F4", "[2]", "[0,1]") + "}", 1),
                      "bad.safetensors", "tensor 'w'", "unknown dtype 'F4'");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("bf16", "[1]", "[0,2]") + "}", 2),
                      "bad.safetensors", "tensor 'w'", "unknown dtype 'bf16'");
}

TEST_F(SafetensorsReader, RejectsNegativeDimension) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[2,-2]", "[0,0]") + "}"),
                      "bad.safetensors", "tensor 'w'", "negative dimension -2");
}

TEST_F(SafetensorsReader, RejectsShapeProductOverflow) {
  // 2^32 * 2^32 overflows; the true size could otherwise wrap to 0 and
  // match data_offsets [0, 0].
  EXPECT_CONTAINS_ALL(
      headerError("{\"w\":" + entry("U8", "[4294967296,4294967296]", "[0,0]") + "}"),
      "bad.safetensors", "tensor 'w'", "element count", "overflows 64 bits");
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("U8", "[18446744073709551615]", "[0,0]") + "}"),
                      "bad.safetensors", "tensor 'w'", "overflows 64 bits");
}

TEST_F(SafetensorsReader, RejectsByteSizeOverflow) {
  // 2^62 elements fit, 2^62 * 4 bytes do not.
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("F32", "[4611686018427387904]", "[0,0]") + "}"),
                      "bad.safetensors", "tensor 'w'", "byte size", "overflows 64 bits");
}

TEST_F(SafetensorsReader, RejectsByteCountMismatch) {
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + entry("F32", "[2]", "[0,4]") + "}", 4),
                      "bad.safetensors", "tensor 'w'", "hold 4 bytes", "needs 8");
}

TEST_F(SafetensorsReader, RejectsEndBeyondDataArea) {
  // 'a' claims 100 bytes of a 50-byte data area; 'b' follows it.
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("U8", "[100]", "[0,100]") +
                                      ",\"b\":" + entry("U8", "[4]", "[100,104]") + "}",
                                  50),
                      "bad.safetensors", "tensor 'a'", "end 100",
                      "beyond the data area (50 bytes)");
}

TEST_F(SafetensorsReader, RejectsTruncatedFile) {
  const std::string header =
      "{\"a\":" + entry("U8", "[4]", "[0,4]") + ",\"b\":" + entry("U8", "[6]", "[4,10]") + "}";
  std::string image = fileImage(header, std::string(10, '\x11'));
  image.resize(image.size() - 3);
  EXPECT_CONTAINS_ALL(openError(image), "bad.safetensors", "tensor 'b'", "truncated",
                      "data area has only 7 bytes");
}

TEST_F(SafetensorsReader, RejectsOverlappingRanges) {
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("F32", "[2]", "[0,8]") +
                                      ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}",
                                  12),
                      "bad.safetensors", "tensor 'b'", "overlap", "'a'");
  // A zero-size range strictly inside another one overlaps it too.
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("U8", "[4]", "[0,4]") +
                                      ",\"z\":" + entry("U8", "[0]", "[2,2]") + "}",
                                  4),
                      "bad.safetensors", "tensor 'z'", "overlap", "'a'");
}

TEST_F(SafetensorsReader, RejectsGapBetweenRanges) {
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("U8", "[4]", "[0,4]") +
                                      ",\"b\":" + entry("U8", "[4]", "[6,10]") + "}",
                                  10),
                      "bad.safetensors", "tensor 'b'", "gap of 2 bytes", "after tensor 'a'");
}

TEST_F(SafetensorsReader, RejectsRangesNotStartingAtZero) {
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("U8", "[4]", "[2,6]") + "}", 6),
                      "bad.safetensors", "tensor 'a'", "gap of 2 bytes", "must start at 0");
}

TEST_F(SafetensorsReader, RejectsTrailingBytes) {
  EXPECT_CONTAINS_ALL(headerError("{\"a\":" + entry("U8", "[4]", "[0,4]") + "}", 7),
                      "bad.safetensors", "3 trailing bytes");
  EXPECT_CONTAINS_ALL(headerError("{}", 1), "bad.safetensors", "1 trailing bytes");
}

TEST_F(SafetensorsReader, RejectsDeepNesting) {
  const std::string deep(200, '[');
  EXPECT_CONTAINS_ALL(headerError("{\"w\":" + deep + std::string(200, ']') + "}"),
                      "bad.safetensors", "nesting");
}

TEST_F(SafetensorsReader, RejectsMissingFileAndDirectory) {
  EXPECT_CONTAINS_ALL(errorOf([&] { SafetensorsFile::open(path("none.safetensors")); }),
                      "none.safetensors", "cannot open");
  EXPECT_CONTAINS_ALL(errorOf([&] { SafetensorsFile::open(dir_); }), dir_.c_str(),
                      "not a regular file");
}

TEST_F(SafetensorsReader, MemoryImageErrorsNameTheSource) {
  const std::string image = fileImage("{\"w\":" + entry("F4", "[1]", "[0,1]") + "}", "x");
  EXPECT_CONTAINS_ALL(errorOf([&] {
                        SafetensorsFile::openFromMemory(
                            reinterpret_cast<const uint8_t *>(image.data()), image.size(),
                            "in-memory.bin");
                      }),
                      "in-memory.bin", "tensor 'w'", "unknown dtype");
}

//===----------------------------------------------------------------------===//
// Acceptance
//===----------------------------------------------------------------------===//

TEST_F(SafetensorsReader, ReadsTensorsInOffsetOrder) {
  const std::string header = "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
                             "\"b\":" +
                             entry("I16", "[2]", "[4,8]") +
                             ",\"a\":" + entry("U8", "[2,2]", "[0,4]") + "}";
  const std::string file =
      writeFile("ok.safetensors", fileImage(header, "\x01\x02\x03\x04\x05\x06\x07\x08"));
  SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.path(), file);
  ASSERT_EQ(st.tensors().size(), 2u);
  const TensorInfo &a = st.tensors()[0];
  const TensorInfo &b = st.tensors()[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.dtype, DType::U8);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.offset, 8 + header.size());
  EXPECT_EQ(a.size, 4u);
  EXPECT_EQ(a.numElements(), 4);
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.dtype, DType::I16);
  EXPECT_EQ(b.offset, 8 + header.size() + 4);
  EXPECT_EQ(st.dataOffset(), 8 + header.size());

  ASSERT_EQ(st.find("b"), &b);
  EXPECT_EQ(st.find("c"), nullptr);
  ByteView bytes = st.bytes("b");
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "\x05\x06\x07\x08");
  EXPECT_EQ(std::string(st.bytes(a).begin(), st.bytes(a).end()), "\x01\x02\x03\x04");
  EXPECT_CONTAINS_ALL(errorOf([&] { st.bytes("nope"); }), "ok.safetensors", "'nope'");
  EXPECT_EQ(st.metadata(), (SafetensorsMetadata{{"format", "pt"}, {"k", "v"}}));
}

TEST_F(SafetensorsReader, AcceptsZeroSizeTensors) {
  const std::string header = "{\"e\":" + entry("F32", "[0,3]", "[0,0]") +
                             ",\"w\":" + entry("F32", "[2]", "[0,8]") +
                             ",\"z\":" + entry("BF16", "[4,0]", "[8,8]") + "}";
  SafetensorsFile st = SafetensorsFile::open(
      writeFile("zero.safetensors", fileImage(header, std::string(8, '\x01'))));
  ASSERT_EQ(st.tensors().size(), 3u);
  EXPECT_EQ(st.tensors()[0].name, "e");
  EXPECT_EQ(st.tensors()[1].name, "w");
  EXPECT_EQ(st.tensors()[2].name, "z");
  EXPECT_EQ(st.find("e")->numElements(), 0);
  EXPECT_EQ(st.bytes("e").size, 0u);
  EXPECT_EQ(st.bytes("z").size, 0u);
  EXPECT_EQ(st.bytes("w").size, 8u);
  // A file of nothing but zero-size tensors has an empty data area.
  SafetensorsFile empty = SafetensorsFile::open(
      writeFile("empty.safetensors", fileImage("{\"e\":" + entry("U8", "[0]", "[0,0]") + "}")));
  EXPECT_EQ(empty.tensors().size(), 1u);
}

TEST_F(SafetensorsReader, AcceptsRankZeroTensors) {
  const std::string header = "{\"s\":" + entry("F64", "[]", "[0,8]") + "}";
  SafetensorsFile st = SafetensorsFile::open(
      writeFile("scalar.safetensors", fileImage(header, std::string(8, '\x02'))));
  const TensorInfo *s = st.find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numElements(), 1);
  EXPECT_EQ(s->size, 8u);
}

TEST_F(SafetensorsReader, AcceptsPaddedHeaders) {
  const std::string header = "{\"w\":" + entry("U8", "[3]", "[0,3]") + "}";
  for (size_t padding : {size_t{1}, size_t{7}, size_t{100}}) {
    const std::string padded = header + std::string(padding, ' ');
    SafetensorsFile st =
        SafetensorsFile::open(writeFile("padded.safetensors", fileImage(padded, "abc")));
    EXPECT_EQ(st.dataOffset(), 8 + padded.size());
    EXPECT_EQ(std::string(st.bytes("w").begin(), st.bytes("w").end()), "abc");
  }
}

TEST_F(SafetensorsReader, AcceptsEmptyHeader) {
  SafetensorsFile st = SafetensorsFile::open(writeFile("e.safetensors", fileImage("{}")));
  EXPECT_TRUE(st.tensors().empty());
  EXPECT_TRUE(st.metadata().empty());
  SafetensorsFile padded = SafetensorsFile::open(writeFile("p.safetensors", fileImage("{}      ")));
  EXPECT_EQ(padded.dataOffset(), 16u);
}

TEST_F(SafetensorsReader, AcceptsEveryDType) {
  const std::vector<DType> all = {DType::BOOL, DType::U8,      DType::I8,     DType::U16,
                                  DType::I16,  DType::U32,     DType::I32,    DType::U64,
                                  DType::I64,  DType::F16,     DType::BF16,   DType::F32,
                                  DType::F64,  DType::F8_E4M3, DType::F8_E5M2};
  std::string header = "{";
  uint64_t offset = 0;
  for (DType dtype : all) {
    const uint64_t size = 3 * dtypeSize(dtype);
    if (header.size() > 1)
      header += ",";
    header += "\"t_" + std::string(dtypeName(dtype)) + "\":" +
              entry(std::string(dtypeName(dtype)), "[3]",
                    "[" + std::to_string(offset) + "," + std::to_string(offset + size) + "]");
    offset += size;
  }
  header += "}";
  SafetensorsFile st = SafetensorsFile::open(
      writeFile("all.safetensors", fileImage(header, std::string(offset, '\x7f'))));
  ASSERT_EQ(st.tensors().size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const TensorInfo &info = st.tensors()[i];
    EXPECT_EQ(info.name, "t_" + std::string(dtypeName(all[i])));
    EXPECT_EQ(info.dtype, all[i]);
    EXPECT_EQ(info.size, static_cast<uint64_t>(3 * dtypeSize(all[i])));
  }
}

TEST_F(SafetensorsReader, AcceptsUnicodeNames) {
  // "\u00e9" in JSON and the raw UTF-8 bytes name the same tensor.
  const std::string header = "{\"caf\\u00e9\":" + entry("U8", "[1]", "[0,1]") +
                             ",\"\xe2\x82\xac\":" + entry("U8", "[1]", "[1,2]") + "}";
  SafetensorsFile st = SafetensorsFile::open(writeFile("u.safetensors", fileImage(header, "xy")));
  EXPECT_NE(st.find("caf\xc3\xa9"), nullptr);
  EXPECT_NE(st.find("\xe2\x82\xac"), nullptr);
}

TEST_F(SafetensorsReader, OpenFromMemoryMatchesOpen) {
  const std::string image =
      fileImage("{\"w\":" + entry("U16", "[2]", "[0,4]") + "}", std::string("\x01\x00\x02\x00", 4));
  SafetensorsFile fromFile = SafetensorsFile::open(writeFile("m.safetensors", image));
  SafetensorsFile fromMemory = SafetensorsFile::openFromMemory(
      reinterpret_cast<const uint8_t *>(image.data()), image.size(), "mem");
  ASSERT_EQ(fromMemory.tensors().size(), 1u);
  EXPECT_EQ(fromMemory.tensors()[0].offset, fromFile.tensors()[0].offset);
  EXPECT_EQ(fromMemory.bytes("w").data,
            reinterpret_cast<const uint8_t *>(image.data()) + fromFile.dataOffset());
}

TEST_F(SafetensorsReader, IsMovable) {
  static_assert(!std::is_copy_constructible_v<SafetensorsFile>);
  static_assert(std::is_nothrow_move_constructible_v<SafetensorsFile>);
  const std::string file =
      writeFile("mv.safetensors", fileImage("{\"w\":" + entry("U8", "[3]", "[0,3]") + "}", "abc"));
  SafetensorsFile first = SafetensorsFile::open(file);
  const uint8_t *data = first.bytes("w").data;
  SafetensorsFile second = std::move(first);
  EXPECT_EQ(second.bytes("w").data, data); // the mapping moved, not copied
  SafetensorsFile third = SafetensorsFile::open(file);
  third = std::move(second);
  EXPECT_EQ(std::string(third.bytes("w").begin(), third.bytes("w").end()), "abc");
}

} // namespace
} // namespace kiln
