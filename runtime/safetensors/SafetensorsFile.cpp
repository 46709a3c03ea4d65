#include "runtime/safetensors/SafetensorsFile.h"

#include "runtime/core/InputFile.h"
#include "runtime/core/StrictJson.h"
#include "runtime/core/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {
namespace {

using json = nlohmann::json;

struct FdGuard {
  int fd;
  ~FdGuard() { ::close(fd); }
};

uint64_t readLittleEndian64(const uint8_t *p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | p[i];
  return value;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

// A JSON value for an error message, cut short if large.
std::string shortDump(const json &value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxShown = 100;
  if (text.size() > kMaxShown)
    text = text.substr(0, kMaxShown) + "...";
  return text;
}

// Builds the error messages of one file: "<path>: [tensor '<name>': ]<what>".
class Reporter {
public:
  explicit Reporter(const std::string &path) : path_(path) {}

  [[noreturn]] void fail(const std::string &what) const {
    throw SafetensorsError(path_ + ": " + what);
  }
  [[noreturn]] void fail(std::string_view tensor, const std::string &what) const {
    throw SafetensorsError(path_ + ": tensor " + quoteName(tensor) + ": " + what);
  }

private:
  const std::string &path_;
};

// Reads the non-negative integers of `data_offsets`.
std::pair<uint64_t, uint64_t> parseDataOffsets(const Reporter &report, std::string_view name,
                                               const json &value) {
  const char *expected = "'data_offsets' must be an array of two non-negative integers";
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned())
    report.fail(name, std::string(expected) + ", got " + shortDump(value));
  const uint64_t begin = value[0].get<uint64_t>();
  const uint64_t end = value[1].get<uint64_t>();
  if (begin > end)
    report.fail(name, "'data_offsets' begin " + std::to_string(begin) + " is greater than end " +
                          std::to_string(end));
  return {begin, end};
}

std::vector<int64_t> parseShape(const Reporter &report, std::string_view name, const json &value) {
  if (!value.is_array())
    report.fail(name, "'shape' is not an array");
  std::vector<int64_t> shape;
  shape.reserve(value.size());
  for (const json &dim : value) {
    if (!dim.is_number_integer())
      report.fail(name, "'shape' has a non-integer entry " + shortDump(dim));
    if (dim.is_number_unsigned()) {
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        report.fail(name, "'shape' dimension " + std::to_string(size) + " overflows 64 bits");
      shape.push_back(static_cast<int64_t>(size));
    } else {
      const int64_t size = dim.get<int64_t>();
      if (size < 0)
        report.fail(name, "'shape' has negative dimension " + std::to_string(size));
      shape.push_back(size);
    }
  }
  return shape;
}

TensorInfo parseTensor(const Reporter &report, const std::string &name, const json &entry) {
  if (!entry.is_object())
    report.fail(name, "entry is not a JSON object");
  for (const auto &field : entry.items())
    if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets")
      report.fail(name, "unknown field " + quoteName(field.key()));
  for (const char *required : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(required))
      report.fail(name, std::string("missing '") + required + "'");

  TensorInfo info;
  info.name = name;
  const json &dtype = entry["dtype"];
  if (!dtype.is_string())
    report.fail(name, "'dtype' is not a string");
  std::optional<DType> parsed = parseDType(dtype.get_ref<const std::string &>());
  if (!parsed)
    report.fail(name, "unknown dtype " + quoteName(dtype.get_ref<const std::string &>()));
  info.dtype = *parsed;
  info.shape = parseShape(report, name, entry["shape"]);

  int64_t numElements = 1;
  for (int64_t dim : info.shape)
    if (__builtin_mul_overflow(numElements, dim, &numElements))
      report.fail(name, "element count of shape " + shapeString(info.shape) + " overflows 64 bits");
  int64_t expectedBytes;
  if (__builtin_mul_overflow(numElements, dtypeSize(info.dtype), &expectedBytes))
    report.fail(name, "byte size of shape " + shapeString(info.shape) + " x " +
                          std::string(dtypeName(info.dtype)) + " overflows 64 bits");

  auto [begin, end] = parseDataOffsets(report, name, entry["data_offsets"]);
  if (end - begin != static_cast<uint64_t>(expectedBytes))
    report.fail(name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                          "] hold " + std::to_string(end - begin) + " bytes but shape " +
                          shapeString(info.shape) + " of " + std::string(dtypeName(info.dtype)) +
                          " needs " + std::to_string(expectedBytes));
  // Relative to the data area until the tiling check; made absolute after.
  info.offset = begin;
  info.size = end - begin;
  return info;
}

SafetensorsMetadata parseMetadata(const Reporter &report, const json &value) {
  if (!value.is_object())
    report.fail("'__metadata__' is not a JSON object");
  SafetensorsMetadata metadata;
  for (const auto &item : value.items()) {
    if (!item.value().is_string())
      report.fail("'__metadata__' value of key " + quoteName(item.key()) + " is not a string");
    metadata.emplace(item.key(), item.value().get<std::string>());
  }
  return metadata;
}

} // namespace

int64_t TensorInfo::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

json parseJsonRejectingDuplicates(std::string_view text, const std::string &source) {
  try {
    return parseStrictJson(text, source);
  } catch (const StrictJsonError &error) {
    throw SafetensorsError(error.what());
  }
}

SafetensorsFile SafetensorsFile::open(const std::string &path) {
  // O_NONBLOCK: a FIFO opens at once (and is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw SafetensorsError(path + ": " + openFailure(path, errno));
  FdGuard guard{fd};
  struct stat status;
  if (::fstat(fd, &status) != 0)
    throw SafetensorsError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    throw SafetensorsError(path + ": " + inputFileProblem(path));

  SafetensorsFile file;
  file.path_ = path;
  file.size_ = static_cast<uint64_t>(status.st_size);
  if (file.size_ > std::numeric_limits<size_t>::max())
    throw SafetensorsError(path + ": file too large to map");
  // A file under 8 bytes is rejected by parse() without looking at its bytes
  // (and mmap cannot map an empty file).
  if (file.size_ >= 8) {
    void *mapping = ::mmap(nullptr, static_cast<size_t>(file.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED)
      throw SafetensorsError(path + ": cannot mmap: " + std::strerror(errno));
    file.mapping_ = mapping;
    file.data_ = static_cast<const uint8_t *>(mapping);
  }
  // The mapping outlives the descriptor, which the guard now closes. If the
  // file is truncated by someone else while mapped, reads fault (SIGBUS):
  // checkpoints must not be rewritten in place, which is why the writer
  // renames a new file over the old one instead.
  file.parse();
  return file;
}

SafetensorsFile SafetensorsFile::openFromMemory(const uint8_t *data, size_t size,
                                                std::string source) {
  SafetensorsFile file;
  file.path_ = std::move(source);
  file.data_ = data;
  file.size_ = size;
  file.parse();
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile &&other) noexcept { *this = std::move(other); }

SafetensorsFile &SafetensorsFile::operator=(SafetensorsFile &&other) noexcept {
  if (this == &other)
    return *this;
  release();
  path_ = std::move(other.path_);
  mapping_ = std::exchange(other.mapping_, nullptr);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  dataOffset_ = std::exchange(other.dataOffset_, 0);
  tensors_ = std::move(other.tensors_);
  byName_ = std::move(other.byName_);
  metadata_ = std::move(other.metadata_);
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (mapping_)
    ::munmap(mapping_, static_cast<size_t>(size_));
  mapping_ = nullptr;
  data_ = nullptr;
}

void SafetensorsFile::parse() {
  const Reporter report(path_);
  if (size_ < 8)
    report.fail("file is " + std::to_string(size_) +
                " bytes, shorter than the 8-byte header length");
  const uint64_t headerSize = readLittleEndian64(data_);
  if (headerSize > kMaxHeaderSize)
    report.fail("header length " + std::to_string(headerSize) + " exceeds the limit of " +
                std::to_string(kMaxHeaderSize) + " bytes");
  if (headerSize > size_ - 8)
    report.fail("header length " + std::to_string(headerSize) + " is larger than the file (" +
                std::to_string(size_) + " bytes)");
  dataOffset_ = 8 + headerSize;
  const uint64_t dataSize = size_ - dataOffset_;

  const std::string_view text(reinterpret_cast<const char *>(data_ + 8),
                              static_cast<size_t>(headerSize));
  if (size_t bad = firstInvalidUtf8(text); bad != std::string_view::npos)
    report.fail("header is not valid UTF-8 (bad byte at header offset " + std::to_string(bad) +
                ")");
  // The reference implementation insists on '{' first; trailing spaces (the
  // format's padding) are JSON whitespace and pass the parser.
  if (text.empty() || text.front() != '{')
    report.fail("header is not a JSON object (it must start with '{')");
  const json header = parseJsonRejectingDuplicates(text, path_ + ": header");
  if (!header.is_object())
    report.fail("header is not a JSON object");

  for (const auto &item : header.items()) {
    if (item.key() == "__metadata__")
      metadata_ = parseMetadata(report, item.value());
    else
      tensors_.push_back(parseTensor(report, item.key(), item.value()));
  }

  // Sorted by begin, the ranges must tile [0, dataSize) with no gap, overlap
  // or leftover. Zero-size ranges [x, x] fit anywhere on a boundary.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo &a, const TensorInfo &b) {
    return std::tie(a.offset, a.size, a.name) < std::tie(b.offset, b.size, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo *previous = nullptr;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo &info = tensors_[i];
    const uint64_t begin = info.offset, end = info.offset + info.size;
    if (begin < covered)
      report.fail(info.name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                 "] overlap those of tensor " + quoteName(previous->name) +
                                 " (which end at " + std::to_string(covered) + ")");
    if (begin > covered)
      report.fail(info.name, "gap of " + std::to_string(begin - covered) +
                                 " bytes before it in the data area (" +
                                 (previous ? "after tensor " + quoteName(previous->name)
                                           : std::string("ranges must start at 0")) +
                                 ")");
    if (end > dataSize) {
      if (i + 1 == tensors_.size())
        report.fail(info.name, "file is truncated: data ends at data offset " +
                                   std::to_string(end) + " but the data area has only " +
                                   std::to_string(dataSize) + " bytes");
      report.fail(info.name, "data_offsets end " + std::to_string(end) +
                                 " is beyond the data area (" + std::to_string(dataSize) +
                                 " bytes)");
    }
    covered = end;
    previous = &info;
  }
  if (covered != dataSize)
    report.fail(std::to_string(dataSize - covered) +
                " trailing bytes after the last tensor (data area is " + std::to_string(dataSize) +
                " bytes, tensors cover " + std::to_string(covered) + ")");

  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].offset += dataOffset_;
    byName_.emplace(tensors_[i].name, i);
  }
}

const TensorInfo *SafetensorsFile::find(std::string_view name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

ByteView SafetensorsFile::bytes(const TensorInfo &info) const {
  if (info.offset < dataOffset_ || info.offset > size_ || info.size > size_ - info.offset)
    throw SafetensorsError(path_ + ": tensor " + quoteName(info.name) +
                           " is not a tensor of this file");
  return {data_ + info.offset, static_cast<size_t>(info.size)};
}

ByteView SafetensorsFile::bytes(std::string_view name) const {
  const TensorInfo *info = find(name);
  if (!info)
    throw SafetensorsError(path_ + ": no tensor named " + quoteName(name));
  return bytes(*info);
}

} // namespace kiln
