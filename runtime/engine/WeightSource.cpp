#include "runtime/engine/WeightSource.h"

#include "runtime/artifact/ModelFacts.h"
#include "runtime/core/QuoteName.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/SyntheticWeights.h"
#include "runtime/safetensors/Checkpoint.h"
#include "runtime/safetensors/NonFinite.h"

#include <map>
#include <stdexcept>

namespace kiln {
namespace {

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

  std::vector<std::string> tensorNames() const override { return checkpoint_.tensorNames(); }

private:
  Checkpoint checkpoint_;
};

class FiniteWeights final : public WeightSource {
public:
  explicit FiniteWeights(std::unique_ptr<WeightSource> inner) : inner_(std::move(inner)) {}

  std::string description() const override { return inner_->description(); }
  std::optional<TensorType> find(const std::string &name) const override {
    return inner_->find(name);
  }
  std::vector<std::string> tensorNames() const override { return inner_->tensorNames(); }
  ByteView read(const std::string &name, std::vector<uint8_t> &scratch) const override {
    const ByteView bytes = inner_->read(name, scratch);
    const std::optional<TensorType> type = inner_->find(name);
    const NonFiniteCount count = countNonFinite(type->dtype, bytes.data, bytes.size);
    if (count.any())
      throw RuntimeError(inner_->description() + ": tensor '" + name + "' (" +
                         std::string(dtypeName(type->dtype)) + ") holds " +
                         describeNonFinite(count) + " (--check-weights)");
    return bytes;
  }
  std::optional<std::pair<size_t, uint64_t>> storageOrder(const std::string &name) const override {
    return inner_->storageOrder(name);
  }

private:
  std::unique_ptr<WeightSource> inner_;
};

uint64_t parseSeed(const std::string &text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    throw RuntimeError("synthetic weights: seed " + quoteName(text) + " is not a decimal number");
  try {
    return std::stoull(text);
  } catch (const std::out_of_range &) {
    throw RuntimeError("synthetic weights: seed " + quoteName(text) + " does not fit in 64 bits");
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

std::unique_ptr<WeightSource> checkFiniteWeights(std::unique_ptr<WeightSource> source) {
  return std::make_unique<FiniteWeights>(std::move(source));
}

std::unique_ptr<WeightSource> openWeightSource(const std::string &spec,
                                               const std::string &configJson,
                                               const std::string &weightFormat) {
  const std::string prefix = "synthetic:";
  if (spec.compare(0, prefix.size(), prefix) != 0)
    return openCheckpointWeights(spec);
  const uint64_t seed = parseSeed(spec.substr(prefix.size()));
  if (weightFormat != "bf16" && weightFormat != "nvfp4")
    throw RuntimeError("synthetic weights: unknown weight format " + quoteName(weightFormat) +
                       " (expected bf16 or nvfp4)");
  const ModelFacts model = readModelFacts(configJson, "the artifact's model.config_json");
  return makeSyntheticWeights(model.modelType, configJson, weightFormat, seed);
}

std::string describeTensorType(const TensorType &type) {
  std::string text = std::string(dtypeName(type.dtype)) + " [";
  for (size_t i = 0; i < type.shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(type.shape[i]);
  return text + "]";
}

} // namespace kiln
