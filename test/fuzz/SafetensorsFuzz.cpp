// libFuzzer target for the safetensors reader. Any input must either open or
// fail with SafetensorsError; nothing else may escape, and a file that opens
// must keep the reader's promises (ranges tile the data area, sizes match
// dtype x shape, find() agrees with tensors()) and survive a round trip
// through the writer's header encoder.
#include "runtime/safetensors/SafetensorsFile.h"
#include "runtime/safetensors/SafetensorsWriter.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace kiln;

void check(bool condition) {
  if (!condition)
    std::abort();
}

void checkInvariants(const SafetensorsFile &file, size_t size) {
  uint64_t next = file.dataOffset();
  for (const TensorInfo &info : file.tensors()) {
    check(info.offset == next);
    check(info.size == tensorByteSize(info.dtype, info.shape));
    check(file.find(info.name) == &info);
    const ByteView bytes = file.bytes(info);
    check(bytes.size == info.size);
    // Touch both ends so that ASan sees any out-of-bounds view.
    if (bytes.size > 0) {
      volatile uint8_t sink = bytes.data[0] ^ bytes.data[bytes.size - 1];
      (void)sink;
    }
    next += info.size;
  }
  check(next == size);
}

// Re-encodes the header (sorted, padded) in front of the same data and
// checks that the same tensors come back.
void checkRoundTrip(const SafetensorsFile &file, const uint8_t *data, size_t size) {
  std::vector<TensorDecl> decls;
  for (const TensorInfo &info : file.tensors())
    decls.push_back({info.name, info.dtype, info.shape});
  std::string image = encodeSafetensorsHeader(decls, file.metadata(), "round trip");
  check(image.size() % 8 == 0);
  image.append(reinterpret_cast<const char *>(data + file.dataOffset()), size - file.dataOffset());
  SafetensorsFile again = SafetensorsFile::openFromMemory(
      reinterpret_cast<const uint8_t *>(image.data()), image.size(), "round trip");
  check(again.metadata() == file.metadata());
  check(again.tensors().size() == file.tensors().size());
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const TensorInfo &a = file.tensors()[i], &b = again.tensors()[i];
    check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape);
    check(a.size == b.size);
    check(a.offset - file.dataOffset() == b.offset - again.dataOffset());
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(SafetensorsFile::openFromMemory(data, size, "fuzz-input"));
  } catch (const SafetensorsError &) {
    return 0; // rejected cleanly: the expected outcome for most inputs
  }
  // Outside the try: an exception here is a bug and must crash the fuzzer.
  checkInvariants(*file, size);
  checkRoundTrip(*file, data, size);
  return 0;
}
