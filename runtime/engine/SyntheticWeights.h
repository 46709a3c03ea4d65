// `synthetic:SEED` weights: a model family's deterministic checkpoint
// generator, which makes any tensor of its checkpoints from a seed, with no
// files. The runtime knows no model: a family's generator registers itself
// under the config's model_type (Muse Spark's: models/muse_spark/
// SyntheticSource.cpp, linked into every program that links the engine), and
// the engine finds it by the artifact's config.
//
// Besides the bytes (WeightSource::read), a generator says how each tensor is
// drawn, so that the artifact's synthesis kernels make the same bytes where
// the weights live (DeviceSynthesis.h): seeded normal streams, rounded to
// bf16 or quantised to NVFP4.
#pragma once

#include "runtime/engine/WeightSource.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

class SyntheticWeightSource : public WeightSource {
public:
  struct Normal {
    double mean = 0;
    double stddev = 1;
  };
  // An NVFP4 projection: the [rows, cols] matrix of values quantised.
  struct Nvfp4Module {
    int64_t rows = 0, cols = 0;
    Normal distribution;
  };

  // The stream feeding tensor `name` (NVFP4 pieces of one projection share
  // one), and the key of that stream under this source's seed.
  virtual std::string streamName(const std::string &name) const = 0;
  virtual uint64_t streamKey(const std::string &stream) const = 0;
  // How a BF16 tensor's elements are drawn; RuntimeError for a tensor the
  // generator does not know.
  virtual Normal bf16Distribution(const std::string &name, const TensorType &type) const = 0;
  // The projection an NVFP4 piece (`.weight` codes) quantises.
  virtual Nvfp4Module nvfp4Module(const std::string &name, const TensorType &type) const = 0;
};

// Makes the generator for a config (the artifact's model.config_json) and
// checkpoint format ("bf16", "nvfp4"); RuntimeError for a config it refuses.
using SyntheticWeightsFactory = std::function<std::unique_ptr<SyntheticWeightSource>(
    const std::string &configJson, const std::string &weightFormat, uint64_t seed)>;

// Called once per family, at static initialisation; returns true.
bool registerSyntheticWeights(const std::string &modelType, SyntheticWeightsFactory factory);

// The registered families, sorted ("muse_spark").
std::vector<std::string> syntheticWeightFamilies();

// The generator of `modelType`; RuntimeError naming the families there are
// when none is registered for it.
std::unique_ptr<SyntheticWeightSource> makeSyntheticWeights(const std::string &modelType,
                                                            const std::string &configJson,
                                                            const std::string &weightFormat,
                                                            uint64_t seed);

} // namespace kiln
