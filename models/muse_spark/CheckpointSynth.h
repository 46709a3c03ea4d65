// Writing synthetic Muse Spark checkpoints (model card section 3, BF16 or
// NVFP4) from a seed, and checking any checkpoint against a config.
#pragma once

#include "models/muse_spark/Config.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::muse_spark {

// Bytes of tensor data written so far out of the total.
using SynthProgress = std::function<void(uint64_t done, uint64_t total)>;

// Writes every tensor of checkpointManifest(config, format), in manifest
// order, with the bytes of synthesizeTensor, as shards of at most
// `maxShardBytes` (see writeShardedCheckpoint) plus the index and a
// config.json. Tensors are produced one at a time, so memory stays at about
// one tensor. Same arguments, byte-identical directory. Shard files of an
// earlier write into `dir` that the new index does not list
// (model-*-of-*.safetensors, model.safetensors) are removed. Throws
// SafetensorsError or std::runtime_error naming the file on failure.
void writeSyntheticCheckpoint(const Config &config, WeightFormat format, uint64_t seed,
                              const std::string &dir, uint64_t maxShardBytes,
                              const SynthProgress &progress = {});

// The HF-style config.json text for a checkpoint of `config` in `format`
// (2-space indent, trailing newline). NVFP4 adds quantization_config with
// nvfp4ExcludeModules().
std::string checkpointConfigJson(const Config &config, WeightFormat format);

// The linear modules an NVFP4 checkpoint keeps in BF16, as glob patterns:
// lm_head, the embedding, attention, router, pooler, unpooler and the experts
// of layers 0 and L-1.
std::vector<std::string> nvfp4ExcludeModules(const Config &config);

struct CheckpointCheck {
  // One line per problem, naming the tensor or file; empty when all is well.
  std::vector<std::string> problems;
  size_t numTensors = 0;
  uint64_t totalBytes = 0;
  // The format detected (nullopt if the checkpoint could not be read).
  std::optional<WeightFormat> format;

  bool ok() const { return problems.empty(); }
};

// Opens a .safetensors file or a checkpoint directory with the validating
// readers. The format is NVFP4 iff some expert tensor is U8 or the directory's
// config.json declares quantization_config. With a config, every tensor's
// name, dtype and shape is compared with checkpointManifest(config, format):
// missing, unexpected and mismatched tensors are each reported by name. A
// config.json in the directory is parsed, and its sizes compared with the
// config's. With `values`, every float tensor's data is read too, and each
// tensor holding NaN or infinite values is reported (how many, and the
// first's element); `progress` (bytes read, of all) follows the reading.
CheckpointCheck checkCheckpoint(const std::string &path, const Config *config = nullptr,
                                bool values = false,
                                const std::function<void(uint64_t, uint64_t)> &progress = nullptr);

} // namespace kiln::muse_spark
