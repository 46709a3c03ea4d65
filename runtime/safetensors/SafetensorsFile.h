// Read-only access to one .safetensors file: an 8-byte little-endian header
// length, a JSON header describing the tensors, then the tensor bytes. The
// file is memory-mapped and every rule of the format is checked on open, so a
// SafetensorsFile that exists is well formed: its ranges tile the data area
// exactly and every byte count matches its dtype and shape.
#pragma once

#include "runtime/core/DType.h"
#include "runtime/core/QuoteName.h"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Every malformed input, unreadable file or invalid argument of the
// safetensors reader, writer and checkpoint code is reported with this.
class SafetensorsError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The `__metadata__` map of a file (string to string).
using SafetensorsMetadata = std::map<std::string, std::string>;

// A borrowed byte range (C++17 stand-in for std::span<const uint8_t>).
struct ByteView {
  const uint8_t *data = nullptr;
  size_t size = 0;

  const uint8_t *begin() const { return data; }
  const uint8_t *end() const { return data + size; }
  bool empty() const { return size == 0; }
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  // Absolute position of the first byte in the file, and the byte count.
  uint64_t offset = 0;
  uint64_t size = 0;

  // Product of the shape (1 for rank 0); fits in int64 by construction.
  int64_t numElements() const;
};

class SafetensorsFile {
public:
  // The format's cap on the JSON header, as in the reference implementation.
  static constexpr uint64_t kMaxHeaderSize = 100'000'000;

  // Maps and validates `path`. Throws SafetensorsError naming the path (and
  // the tensor, where one is at fault) on any violation of the format.
  static SafetensorsFile open(const std::string &path);
  // Same checks on a file image already in memory, which is not copied: it
  // must outlive the returned object. `source` stands for the path in errors.
  static SafetensorsFile openFromMemory(const uint8_t *data, size_t size, std::string source);

  SafetensorsFile(SafetensorsFile &&other) noexcept;
  SafetensorsFile &operator=(SafetensorsFile &&other) noexcept;
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;
  ~SafetensorsFile();

  const std::string &path() const { return path_; }
  uint64_t fileSize() const { return size_; }
  // Absolute offset of the data area (8 + header length).
  uint64_t dataOffset() const { return dataOffset_; }

  // All tensors, ordered by data offset (ties: by end, then name).
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  // nullptr when there is no tensor of that name.
  const TensorInfo *find(std::string_view name) const;
  // The bytes of a tensor of this file.
  ByteView bytes(const TensorInfo &info) const;
  // The bytes of the named tensor; throws SafetensorsError if absent.
  ByteView bytes(std::string_view name) const;
  const SafetensorsMetadata &metadata() const { return metadata_; }

private:
  SafetensorsFile() = default;
  void parse();
  void release() noexcept;

  std::string path_;
  // Owned mapping (nullptr for openFromMemory) and the bytes it covers.
  void *mapping_ = nullptr;
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t dataOffset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> byName_;
  SafetensorsMetadata metadata_;
};

// parseStrictJson (runtime/core/StrictJson.h: bounded nesting, no duplicate
// keys) with its errors and nlohmann's as SafetensorsError messages starting
// with `source`. Shared with the index
// reader of Checkpoint.
nlohmann::json parseJsonRejectingDuplicates(std::string_view text, const std::string &source);

} // namespace kiln
