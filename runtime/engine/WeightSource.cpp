#include "runtime/engine/WeightSource.h"

#include "models/muse_spark/SyntheticWeights.h"
#include "models/muse_spark/WeightManifest.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/safetensors/Checkpoint.h"

#include <map>
#include <stdexcept>

namespace kiln {
namespace {

using muse_spark::Config;
using muse_spark::TensorSpec;
using muse_spark::WeightFormat;

class CheckpointWeights final : public WeightSource {
public:
  explicit CheckpointWeights(Checkpoint checkpoint) : checkpoint_(std::move(checkpoint)) {}

  std::string description() const override { return "checkpoint " + checkpoint_.directory(); }

  std::optional<TensorType> find(const std::string &name) const override {
    CheckpointTensor tensor = checkpoint_.find(name);
    if (!tensor)
      return std::nullopt;
    return TensorType{tensor.info->dtype, tensor.info->shape};
  }

  ByteView read(const std::string &name, std::vector<uint8_t> &) const override {
    return checkpoint_.find(name).bytes;
  }

  std::optional<std::pair<size_t, uint64_t>> storageOrder(const std::string &name) const override {
    const CheckpointTensor tensor = checkpoint_.find(name);
    if (!tensor)
      return std::nullopt;
    const std::vector<SafetensorsFile> &files = checkpoint_.files();
    const size_t file = static_cast<size_t>(tensor.file - files.data());
    return std::make_pair(file,
                          static_cast<uint64_t>(reinterpret_cast<uintptr_t>(tensor.bytes.data)));
  }

private:
  Checkpoint checkpoint_;
};

class SyntheticWeights final : public WeightSource {
public:
  SyntheticWeights(const Config &config, WeightFormat format, uint64_t seed)
      : config_(config), seed_(seed) {
    for (TensorSpec &spec : muse_spark::checkpointManifest(config, format)) {
      std::string name = spec.name;
      specs_.emplace(std::move(name), std::move(spec));
    }
  }

  std::string description() const override {
    return "synthetic weights (seed " + std::to_string(seed_) + ")";
  }

  std::optional<TensorType> find(const std::string &name) const override {
    auto it = specs_.find(name);
    if (it == specs_.end())
      return std::nullopt;
    return TensorType{it->second.dtype, it->second.shape};
  }

  ByteView read(const std::string &name, std::vector<uint8_t> &scratch) const override {
    const TensorSpec &spec = specs_.at(name);
    int64_t bytes = dtypeSize(spec.dtype);
    for (int64_t size : spec.shape)
      bytes *= size;
    scratch.resize(static_cast<size_t>(bytes));
    try {
      muse_spark::synthesizeTensor(config_, spec, seed_, scratch.data());
    } catch (const std::invalid_argument &error) {
      throw RuntimeError(error.what());
    }
    return {scratch.data(), scratch.size()};
  }

private:
  Config config_;
  uint64_t seed_;
  std::map<std::string, TensorSpec> specs_;
};

uint64_t parseSeed(const std::string &text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    throw RuntimeError("synthetic weights: seed '" + text + "' is not a decimal number");
  try {
    return std::stoull(text);
  } catch (const std::out_of_range &) {
    throw RuntimeError("synthetic weights: seed '" + text + "' does not fit in 64 bits");
  }
}

} // namespace

std::unique_ptr<WeightSource> openCheckpointWeights(const std::string &dir) {
  try {
    return std::make_unique<CheckpointWeights>(Checkpoint::open(dir));
  } catch (const SafetensorsError &error) {
    throw RuntimeError(error.what());
  }
}

std::unique_ptr<WeightSource> makeSyntheticWeights(const muse_spark::Config &config,
                                                   muse_spark::WeightFormat format, uint64_t seed) {
  return std::make_unique<SyntheticWeights>(config, format, seed);
}

std::unique_ptr<WeightSource> openWeightSource(const std::string &spec,
                                               const std::string &configJson,
                                               const std::string &weightFormat) {
  const std::string prefix = "synthetic:";
  if (spec.compare(0, prefix.size(), prefix) != 0)
    return openCheckpointWeights(spec);
  const uint64_t seed = parseSeed(spec.substr(prefix.size()));
  WeightFormat format;
  if (weightFormat == "bf16")
    format = WeightFormat::BF16;
  else if (weightFormat == "nvfp4")
    format = WeightFormat::NVFP4;
  else
    throw RuntimeError("synthetic weights: unknown weight format '" + weightFormat +
                       "' (expected bf16 or nvfp4)");
  try {
    return makeSyntheticWeights(
        muse_spark::parseConfig(configJson, "the artifact's model.config_json"), format, seed);
  } catch (const muse_spark::ConfigError &error) {
    throw RuntimeError(error.what());
  }
}

std::string describeTensorType(const TensorType &type) {
  std::string text = std::string(dtypeName(type.dtype)) + " [";
  for (size_t i = 0; i < type.shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(type.shape[i]);
  return text + "]";
}

} // namespace kiln
