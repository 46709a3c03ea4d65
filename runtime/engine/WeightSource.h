// Where the runtime's weights come from: a safetensors checkpoint directory,
// or tensors generated on the fly from a seed (`synthetic:SEED`, the bytes
// `kiln-ckpt synth --seed SEED` would write; SyntheticWeights.h).
#pragma once

#include "runtime/core/DType.h"
#include "runtime/safetensors/SafetensorsFile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct TensorType {
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
};

class WeightSource {
public:
  virtual ~WeightSource() = default;
  // "checkpoint DIR" or "synthetic weights (seed N)", for messages.
  virtual std::string description() const = 0;
  // The stored dtype and shape of a tensor; nullopt if there is none.
  virtual std::optional<TensorType> find(const std::string &name) const = 0;
  // The bytes of a tensor find() knows: either a view of storage that lives
  // as long as the source, or `scratch` after filling it. Safe to call from
  // several threads at once (each with its own scratch).
  virtual ByteView read(const std::string &name, std::vector<uint8_t> &scratch) const = 0;
  // Where a tensor's bytes lie in the source's storage, as an order: (file,
  // position in it). Binding in this order reads a checkpoint shard by
  // shard, front to back; none for sources without files.
  virtual std::optional<std::pair<size_t, uint64_t>> storageOrder(const std::string &) const {
    return std::nullopt;
  }
  // Every tensor the source holds, where it can list them (a checkpoint);
  // empty where it makes them on demand.
  virtual std::vector<std::string> tensorNames() const { return {}; }
};

// Opens a checkpoint directory (see Checkpoint); RuntimeError if unreadable.
std::unique_ptr<WeightSource> openCheckpointWeights(const std::string &dir);

// `synthetic:SEED` (SEED a decimal u64) or a checkpoint directory. For
// synthetic weights, the config and format ("bf16", "nvfp4") are the
// artifact's model.config_json and model.weight_format, and the generator is
// the one registered for the config's model_type.
std::unique_ptr<WeightSource> openWeightSource(const std::string &spec,
                                               const std::string &configJson,
                                               const std::string &weightFormat);

// `source` with every tensor scanned as it is read: one holding NaN or
// infinite values (runtime/safetensors/NonFinite.h) throws RuntimeError
// naming the source, the tensor, how many and the first's element.
std::unique_ptr<WeightSource> checkFiniteWeights(std::unique_ptr<WeightSource> source);

// "BF16 [256, 128]".
std::string describeTensorType(const TensorType &type);

} // namespace kiln
