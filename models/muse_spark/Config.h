// Muse Spark model configuration: the fields of an HF-style config.json, parsed
// and checked for consistency. Plain C++ (no MLIR) so the runtime and the
// checkpoint tools can use it too.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::muse_spark {

// Thrown for any unreadable, malformed or inconsistent config. The message
// names the source (file), the field and what was expected.
class ConfigError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

enum class WeightFormat { BF16, NVFP4 };

// `quantization_config` of a ModelOpt NVFP4 checkpoint.
struct Quantization {
  std::string quantMethod = "modelopt";
  std::string quantAlgo = "NVFP4";
  int64_t groupSize = 16;
  std::vector<std::string> excludeModules;
};

struct Config {
  std::string name; // the file stem or built-in name it came from
  std::string modelType = "muse_spark";
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numHiddenLayers = 0;
  int64_t numAttentionHeads = 0;
  int64_t numKeyValueHeads = 0;
  int64_t headDim = 0;
  int64_t slidingWindow = 0;
  int64_t globalAttentionPeriod = 0;
  double ropeTheta = 0;
  int64_t maxPositionEmbeddings = 0;
  double rmsNormEps = 0;
  int64_t numExperts = 0;
  int64_t numExpertsPerTok = 0;
  int64_t moeLatentSize = 0;
  int64_t moeIntermediateSize = 0;
  bool tieWordEmbeddings = false;
  std::optional<Quantization> quantization;

  // Layer i attends globally iff (L-1-i) % period == 0: the last layer is global.
  bool isGlobalLayer(int64_t layer) const {
    return (numHiddenLayers - 1 - layer) % globalAttentionPeriod == 0;
  }
  int64_t numGlobalLayers() const;
  // NVFP4 applies to the experts of layers 1..L-2; layers 0 and L-1 keep BF16.
  WeightFormat expertFormat(int64_t layer) const;
  int64_t qWidth() const { return numAttentionHeads * headDim; }
  int64_t kvWidth() const { return numKeyValueHeads * headDim; }
};

// Parses and validates a config from JSON text. `source` names the input in
// error messages (a path, or "<builtin muse-spark-tiny>").
Config parseConfig(const std::string &jsonText, const std::string &source);

// Reads a file, or resolves a built-in config name (see builtinConfigNames()).
Config loadConfig(const std::string &pathOrName);

// Built-in configs compiled into the binary from models/muse_spark/configs/.
std::vector<std::string> builtinConfigNames();
std::optional<std::string> builtinConfigText(const std::string &name);

// Checks cross-field consistency; throws ConfigError. parseConfig calls it.
void validateConfig(const Config &config, const std::string &source);

} // namespace kiln::muse_spark
