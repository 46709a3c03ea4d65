// A checkpoint directory in the Hugging Face layout: either one
// `model.safetensors`, or shards `model-00001-of-0000N.safetensors` listed by
// `model.safetensors.index.json`:
//   {"metadata": {"total_size": N}, "weight_map": {"tensor": "shard file"}}
// Opening checks that the index and the shards agree tensor by tensor.
#pragma once

#include "runtime/safetensors/SafetensorsFile.h"
#include "runtime/safetensors/SafetensorsWriter.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

// A tensor of a checkpoint: its description, bytes and the file holding it.
// All null/empty when find() did not find it.
struct CheckpointTensor {
  const TensorInfo *info = nullptr;
  ByteView bytes;
  const SafetensorsFile *file = nullptr;

  explicit operator bool() const { return info != nullptr; }
};

class Checkpoint {
public:
  static constexpr const char *kSingleFileName = "model.safetensors";
  static constexpr const char *kIndexFileName = "model.safetensors.index.json";

  // Opens and cross-checks every file; throws SafetensorsError naming the
  // offending tensor and files.
  static Checkpoint open(const std::string &dir);

  const std::string &directory() const { return dir_; }
  bool isSharded() const { return sharded_; }
  // The opened files, sorted by file name.
  const std::vector<SafetensorsFile> &files() const { return files_; }
  size_t numTensors() const { return byName_.size(); }
  // Sum of all tensor byte sizes.
  uint64_t totalBytes() const { return totalBytes_; }
  // Every tensor name, sorted.
  std::vector<std::string> tensorNames() const;
  CheckpointTensor find(std::string_view name) const;

private:
  Checkpoint() = default;
  void addFile(SafetensorsFile file);

  std::string dir_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  // name -> (index in files_, index in that file's tensors()).
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> byName_;
  uint64_t totalBytes_ = 0;
};

// "model-00002-of-00005.safetensors" for index 2 (1-based) of 5.
std::string shardFileName(size_t index, size_t count);

// Writes `tensors` into `dir` (created if needed) as shards holding
// consecutive runs of the given order, each at most `maxShardBytes` of tensor
// data unless a single tensor is larger (it then gets a shard of its own),
// plus the index (keys sorted, 2-space indent). Every shard carries
// `metadata`. Each file is written atomically and the index last, so a
// reader never sees an index whose shards are incomplete. Returns the shard
// file names. Deterministic: same input, same bytes.
std::vector<std::string> writeShardedCheckpoint(const std::string &dir,
                                                const std::vector<TensorData> &tensors,
                                                uint64_t maxShardBytes,
                                                const SafetensorsMetadata &metadata = {},
                                                const WriteProgress &progress = {});

// Same, with bytes produced by `fill` one tensor at a time.
std::vector<std::string> writeShardedCheckpoint(const std::string &dir,
                                                const std::vector<TensorDecl> &tensors,
                                                const TensorFill &fill, uint64_t maxShardBytes,
                                                const SafetensorsMetadata &metadata = {},
                                                const WriteProgress &progress = {});

} // namespace kiln
