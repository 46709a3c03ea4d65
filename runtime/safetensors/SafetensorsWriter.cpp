#include "runtime/safetensors/SafetensorsWriter.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {
namespace {

using json = nlohmann::json;

constexpr size_t kBufferSize = size_t{1} << 20;
// Pieces in which in-memory tensors are handed over, so that progress moves
// during a multi-GB tensor.
constexpr size_t kProgressChunk = size_t{64} << 20;

std::string errnoText() { return std::strerror(errno); }

// JSON string literal for `text`; throws if it is not valid UTF-8.
std::string jsonString(const std::string &text, const std::string &source,
                       const std::string &what) {
  try {
    return json(text).dump();
  } catch (const json::exception &) {
    throw SafetensorsError(source + ": " + what + " is not valid UTF-8");
  }
}

// Makes the rename durable; best effort, as some file systems refuse fsync
// on directories.
void syncParentDirectory(const std::string &path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

} // namespace

uint64_t tensorByteSize(DType dtype, const std::vector<int64_t> &shape, const std::string &what) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0)
      throw SafetensorsError(what + ": negative dimension " + std::to_string(dim));
    if (__builtin_mul_overflow(count, dim, &count))
      throw SafetensorsError(what + ": element count overflows 64 bits");
  }
  int64_t bytes;
  if (__builtin_mul_overflow(count, dtypeSize(dtype), &bytes))
    throw SafetensorsError(what + ": byte size overflows 64 bits");
  return static_cast<uint64_t>(bytes);
}

std::string encodeSafetensorsHeader(const std::vector<TensorDecl> &tensors,
                                    const SafetensorsMetadata &metadata,
                                    const std::string &source) {
  // Data offsets follow the given order; header entries are sorted by name
  // (bytewise: char_traits<char> compares as unsigned char).
  std::map<std::string_view, size_t> byName;
  std::vector<uint64_t> begins(tensors.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorDecl &tensor = tensors[i];
    const std::string what = source + ": tensor " + quoteName(tensor.name);
    if (tensor.name == "__metadata__")
      throw SafetensorsError(what + ": the name is reserved for the metadata");
    if (!byName.emplace(tensor.name, i).second)
      throw SafetensorsError(what + ": duplicate tensor name");
    const uint64_t size = tensorByteSize(tensor.dtype, tensor.shape, what);
    begins[i] = offset;
    if (__builtin_add_overflow(offset, size, &offset))
      throw SafetensorsError(what + ": total data size overflows 64 bits");
  }

  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto &[key, value] : metadata) {
      if (!first)
        text += ',';
      first = false;
      text += jsonString(key, source, "metadata key " + quoteName(key)) + ":" +
              jsonString(value, source, "metadata value of " + quoteName(key));
    }
    text += "}";
  }
  for (const auto &[name, index] : byName) {
    const TensorDecl &tensor = tensors[index];
    if (text.size() > 1)
      text += ',';
    text += jsonString(tensor.name, source, "tensor name " + quoteName(name));
    text += ":{\"dtype\":\"";
    text += dtypeName(tensor.dtype);
    text += "\",\"shape\":[";
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      if (d)
        text += ',';
      text += std::to_string(tensor.shape[d]);
    }
    const uint64_t size = tensorByteSize(tensor.dtype, tensor.shape);
    text += "],\"data_offsets\":[" + std::to_string(begins[index]) + "," +
            std::to_string(begins[index] + size) + "]}";
  }
  text += "}";
  // 8 + header length is a multiple of 8 exactly when the length is.
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > SafetensorsFile::kMaxHeaderSize)
    throw SafetensorsError(source + ": header of " + std::to_string(text.size()) +
                           " bytes exceeds the limit of " +
                           std::to_string(SafetensorsFile::kMaxHeaderSize));

  std::string prefix(8, '\0');
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i, length >>= 8)
    prefix[i] = static_cast<char>(length & 0xFF);
  return prefix + text;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                                     SafetensorsMetadata metadata, WriteProgress progress)
    : path_(std::move(path)), tensors_(std::move(tensors)), progress_(std::move(progress)) {
  // Validate everything before a file is created.
  const std::string header = encodeSafetensorsHeader(tensors_, metadata, path_);
  for (const TensorDecl &tensor : tensors_) {
    sizes_.push_back(tensorByteSize(tensor.dtype, tensor.shape));
    dataSize_ += sizes_.back();
  }

  buffer_.reserve(kBufferSize);
  tempPath_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tempPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const std::string reason = errnoText();
    tempPath_.clear(); // nothing was created
    throw SafetensorsError(path_ + ": cannot create temporary file: " + reason);
  }
  writeOut(reinterpret_cast<const uint8_t *>(header.data()), header.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_)
    abandon();
}

void SafetensorsWriter::abandon() noexcept {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  if (!tempPath_.empty())
    ::unlink(tempPath_.c_str());
  tempPath_.clear();
}

void SafetensorsWriter::fail(const std::string &what) {
  abandon();
  throw SafetensorsError(path_ + ": " + what);
}

void SafetensorsWriter::writeOut(const uint8_t *data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail("write failed: " + errnoText());
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void SafetensorsWriter::flushBuffer() {
  writeOut(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void SafetensorsWriter::append(const void *data, size_t size) {
  if (fd_ < 0)
    throw SafetensorsError(path_ + ": writer is finished or failed");
  if (size > dataSize_ - written_)
    fail("more tensor bytes than declared (" + std::to_string(written_ + size) + " > " +
         std::to_string(dataSize_) + ")");
  const auto *bytes = static_cast<const uint8_t *>(data);
  if (buffer_.size() + size <= kBufferSize) {
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  } else {
    flushBuffer();
    if (size < kBufferSize)
      buffer_.insert(buffer_.end(), bytes, bytes + size);
    else
      writeOut(bytes, size);
  }
  written_ += size;
  if (progress_)
    progress_(written_, dataSize_);
}

void SafetensorsWriter::finish() {
  if (fd_ < 0)
    throw SafetensorsError(path_ + ": writer is finished or failed");
  if (written_ != dataSize_) {
    uint64_t begin = 0;
    size_t index = 0;
    while (begin + sizes_[index] <= written_)
      begin += sizes_[index++];
    fail("tensor " + quoteName(tensors_[index].name) +
         " is incomplete: " + std::to_string(written_ - begin) + " of " +
         std::to_string(sizes_[index]) + " bytes given");
  }
  flushBuffer();
  if (::fsync(fd_) != 0)
    fail("fsync failed: " + errnoText());
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0)
    fail("close failed: " + errnoText());
  if (::rename(tempPath_.c_str(), path_.c_str()) != 0)
    fail("cannot rename " + tempPath_ + " into place: " + errnoText());
  tempPath_.clear();
  finished_ = true;
  syncParentDirectory(path_);
}

std::vector<TensorDecl> declarationsOf(const std::string &where,
                                       const std::vector<TensorData> &tensors) {
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const TensorData &tensor : tensors) {
    const std::string what = where + ": tensor " + quoteName(tensor.name);
    const uint64_t size = tensorByteSize(tensor.dtype, tensor.shape, what);
    if (tensor.bytes.size != size)
      throw SafetensorsError(what + ": got " + std::to_string(tensor.bytes.size) +
                             " bytes but dtype and shape need " + std::to_string(size));
    if (size > 0 && !tensor.bytes.data)
      throw SafetensorsError(what + ": null data");
    decls.push_back({tensor.name, tensor.dtype, tensor.shape});
  }
  return decls;
}

void writeSafetensors(const std::string &path, const std::vector<TensorData> &tensors,
                      const SafetensorsMetadata &metadata, const WriteProgress &progress) {
  SafetensorsWriter writer(path, declarationsOf(path, tensors), metadata, progress);
  for (const TensorData &tensor : tensors)
    for (size_t done = 0; done < tensor.bytes.size; done += kProgressChunk)
      writer.append(tensor.bytes.data + done, std::min(kProgressChunk, tensor.bytes.size - done));
  writer.finish();
}

void writeSafetensors(const std::string &path, const std::vector<TensorDecl> &tensors,
                      const TensorFill &fill, const SafetensorsMetadata &metadata,
                      const WriteProgress &progress) {
  SafetensorsWriter writer(path, tensors, metadata, progress);
  std::unique_ptr<uint8_t[]> buffer;
  uint64_t capacity = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t size = writer.tensorSizes()[i];
    if (size > std::numeric_limits<size_t>::max())
      throw SafetensorsError(path + ": tensor " + quoteName(tensors[i].name) +
                             " is too large for memory");
    if (size > capacity || !buffer) {
      // Uninitialized on purpose: fill() writes every byte.
      buffer.reset(new uint8_t[std::max<uint64_t>(size, 1)]);
      capacity = std::max<uint64_t>(size, 1);
    }
    fill(i, buffer.get());
    writer.append(buffer.get(), static_cast<size_t>(size));
  }
  writer.finish();
}

} // namespace kiln
