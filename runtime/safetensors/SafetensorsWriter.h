// Writing .safetensors files. The output is deterministic: header keys sorted
// by name with `__metadata__` first, the header padded with spaces so that
// the data area starts 8-byte aligned, tensor bytes laid out in the order the
// tensors are given. Files appear atomically: bytes go to
// `<path>.tmp.<pid>`, which is fsynced and renamed over `path` only once
// complete, and removed on any failure.
#pragma once

#include "runtime/safetensors/SafetensorsFile.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// A tensor to be written, before its bytes are known.
struct TensorDecl {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
};

// A tensor to be written together with its bytes (borrowed).
struct TensorData {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  ByteView bytes;
};

// Called as bytes are written: bytes done so far out of the total.
using WriteProgress = std::function<void(uint64_t done, uint64_t total)>;
// Fills the `index`-th declared tensor: writes exactly its byte size to dst.
using TensorFill = std::function<void(size_t index, uint8_t *dst)>;

// Bytes a tensor of this dtype and shape occupies; throws SafetensorsError
// (starting with `what`) for negative dimensions or 64-bit overflow.
uint64_t tensorByteSize(DType dtype, const std::vector<int64_t> &shape,
                        const std::string &what = "tensor");

// The file prefix for these tensors laid out in the given order: the 8-byte
// header length and the padded JSON header. Validates names (unique, valid
// UTF-8, not `__metadata__`) and shapes; errors start with `source`.
std::string encodeSafetensorsHeader(const std::vector<TensorDecl> &tensors,
                                    const SafetensorsMetadata &metadata = {},
                                    const std::string &source = "safetensors header");

// Streams one file: declare the tensors, append their bytes in declared order
// in pieces of any size, then finish(). Memory use is a fixed small buffer,
// so tensors of many GB can be copied through. Destroying the writer before
// finish() succeeded removes the temporary file and leaves `path` untouched.
class SafetensorsWriter {
public:
  SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                    SafetensorsMetadata metadata = {}, WriteProgress progress = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter &) = delete;
  SafetensorsWriter &operator=(const SafetensorsWriter &) = delete;

  // The next bytes of the data area. Throws if they run past the declared
  // total.
  void append(const void *data, size_t size);
  void append(ByteView bytes) { append(bytes.data, bytes.size); }
  // Checks that every declared byte arrived, then syncs and renames the
  // temporary file into place.
  void finish();

  const std::string &path() const { return path_; }
  uint64_t dataSize() const { return dataSize_; }
  uint64_t bytesWritten() const { return written_; }
  // Byte size of each declared tensor, in declared order.
  const std::vector<uint64_t> &tensorSizes() const { return sizes_; }

private:
  [[noreturn]] void fail(const std::string &what);
  void writeOut(const uint8_t *data, size_t size);
  void flushBuffer();
  void abandon() noexcept;

  std::string path_;
  std::string tempPath_;
  std::vector<TensorDecl> tensors_;
  std::vector<uint64_t> sizes_;
  WriteProgress progress_;
  uint64_t dataSize_ = 0;
  uint64_t written_ = 0;
  int fd_ = -1;
  bool finished_ = false;
  std::vector<uint8_t> buffer_;
};

// The declarations of tensors given with their bytes, after checking that
// each byte count matches its dtype and shape; `where` names them in errors.
std::vector<TensorDecl> declarationsOf(const std::string &where,
                                       const std::vector<TensorData> &tensors);

// Writes tensors with their bytes, whose sizes must match dtype and shape.
void writeSafetensors(const std::string &path, const std::vector<TensorData> &tensors,
                      const SafetensorsMetadata &metadata = {}, const WriteProgress &progress = {});

// Writes declared tensors whose bytes `fill` produces one tensor at a time
// (memory: one buffer as large as the largest tensor).
void writeSafetensors(const std::string &path, const std::vector<TensorDecl> &tensors,
                      const TensorFill &fill, const SafetensorsMetadata &metadata = {},
                      const WriteProgress &progress = {});

} // namespace kiln
