// Muse Spark's `synthetic:SEED` generator as the runtime asks for one
// (runtime/engine/SyntheticWeights.h): the tensors of checkpointManifest(),
// made by synthesizeTensor(), and their distributions for the device
// synthesis kernels. Registered for model_type "muse_spark" when a program
// that links the engine starts; the runtime itself never names the model.
#include "models/muse_spark/Config.h"
#include "models/muse_spark/SyntheticWeights.h"
#include "models/muse_spark/WeightManifest.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/SyntheticWeights.h"

#include <map>
#include <stdexcept>

namespace kiln::muse_spark {
namespace {

class MuseSparkSyntheticWeights final : public SyntheticWeightSource {
public:
  MuseSparkSyntheticWeights(const Config &config, WeightFormat format, uint64_t seed)
      : config_(config), seed_(seed) {
    for (TensorSpec &spec : checkpointManifest(config, format)) {
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
    guarded([&] { synthesizeTensor(config_, spec, seed_, scratch.data()); });
    return {scratch.data(), scratch.size()};
  }

  std::string streamName(const std::string &name) const override {
    return syntheticStreamName(name);
  }

  uint64_t streamKey(const std::string &stream) const override {
    return syntheticStreamKey(stream, seed_);
  }

  Normal bf16Distribution(const std::string &name, const TensorType &type) const override {
    SyntheticDistribution dist;
    guarded([&] { dist = syntheticDistribution(config_, tensor(name, type)); });
    return Normal{dist.mean, dist.stddev};
  }

  Nvfp4Module nvfp4Module(const std::string &name, const TensorType &type) const override {
    SyntheticNvfp4Module module;
    guarded([&] { module = syntheticNvfp4Module(config_, tensor(name, type)); });
    return Nvfp4Module{module.rows, module.cols,
                       Normal{module.distribution.mean, module.distribution.stddev}};
  }

private:
  static TensorSpec tensor(const std::string &name, const TensorType &type) {
    TensorSpec spec{};
    spec.name = name;
    spec.dtype = type.dtype;
    spec.shape = type.shape;
    return spec;
  }

  // The generator's refusals (a tensor it does not know) as the runtime's.
  template <typename F> static void guarded(F &&f) {
    try {
      f();
    } catch (const std::invalid_argument &error) {
      throw RuntimeError(error.what());
    }
  }

  Config config_;
  uint64_t seed_;
  std::map<std::string, TensorSpec> specs_;
};

std::unique_ptr<SyntheticWeightSource> makeMuseSparkWeights(const std::string &configJson,
                                                            const std::string &weightFormat,
                                                            uint64_t seed) {
  const WeightFormat format = weightFormat == "nvfp4" ? WeightFormat::NVFP4 : WeightFormat::BF16;
  try {
    return std::make_unique<MuseSparkSyntheticWeights>(
        parseConfig(configJson, "the artifact's model.config_json"), format, seed);
  } catch (const ConfigError &error) {
    throw RuntimeError(error.what());
  }
}

[[maybe_unused]] const bool registered =
    registerSyntheticWeights("muse_spark", makeMuseSparkWeights);

} // namespace
} // namespace kiln::muse_spark
