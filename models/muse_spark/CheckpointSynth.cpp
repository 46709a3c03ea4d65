// Synthetic checkpoint writer and checkpoint checker.
#include "models/muse_spark/CheckpointSynth.h"

#include "runtime/safetensors/NonFinite.h"

#include "runtime/core/AtomicFile.h"

#include "models/muse_spark/SyntheticWeights.h"
#include "models/muse_spark/WeightManifest.h"
#include "runtime/safetensors/Checkpoint.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <unistd.h>

namespace kiln::muse_spark {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr const char *kConfigFileName = "config.json";

std::string joinPath(const std::string &dir, const std::string &name) {
  return (fs::path(dir) / name).string();
}

// Shards of an earlier write that the new index does not list would confuse
// readers (model.safetensors next to an index is an error for Checkpoint).
void removeStaleShards(const std::string &dir, const std::vector<std::string> &keep) {
  static const std::regex shardName(R"(model-[0-9]+-of-[0-9]+\.safetensors|model\.safetensors)");
  const std::set<std::string> kept(keep.begin(), keep.end());
  std::vector<fs::path> stale;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, shardName) && !kept.count(name))
      stale.push_back(entry.path());
  }
  for (const fs::path &path : stale) {
    std::error_code error;
    fs::remove(path, error);
    if (error)
      throw std::runtime_error(path.string() + ": cannot remove stale shard: " + error.message());
  }
}

std::string formatShape(DType dtype, const std::vector<int64_t> &shape) {
  std::string text = std::string(dtypeName(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string quoted(const std::string &name) { return "\"" + name + "\""; }

struct FoundTensor {
  DType dtype;
  std::vector<int64_t> shape;
};

// Compares the sizes of the checkpoint's own config.json with `config`.
void compareConfigs(const Config &stored, const Config &expected, const std::string &source,
                    std::vector<std::string> &problems) {
  const std::pair<const char *, std::pair<int64_t, int64_t>> fields[] = {
      {"vocab_size", {stored.vocabSize, expected.vocabSize}},
      {"hidden_size", {stored.hiddenSize, expected.hiddenSize}},
      {"num_hidden_layers", {stored.numHiddenLayers, expected.numHiddenLayers}},
      {"num_attention_heads", {stored.numAttentionHeads, expected.numAttentionHeads}},
      {"num_key_value_heads", {stored.numKeyValueHeads, expected.numKeyValueHeads}},
      {"head_dim", {stored.headDim, expected.headDim}},
      {"num_experts", {stored.numExperts, expected.numExperts}},
      {"num_experts_per_tok", {stored.numExpertsPerTok, expected.numExpertsPerTok}},
      {"moe_latent_size", {stored.moeLatentSize, expected.moeLatentSize}},
      {"moe_intermediate_size", {stored.moeIntermediateSize, expected.moeIntermediateSize}},
      {"sliding_window", {stored.slidingWindow, expected.slidingWindow}},
      {"global_attention_period", {stored.globalAttentionPeriod, expected.globalAttentionPeriod}},
  };
  for (const auto &[field, values] : fields)
    if (values.first != values.second)
      problems.push_back(source + ": field \"" + field + "\" is " + std::to_string(values.first) +
                         " but config " + quoted(expected.name) + " has " +
                         std::to_string(values.second));
}

} // namespace

std::vector<std::string> nvfp4ExcludeModules(const Config &config) {
  return {
      "lm_head",
      "model.embed_tokens",
      "model.layers.*.self_attn.*",
      "model.layers.*.mlp.router",
      "model.layers.*.mlp.pooler",
      "model.layers.*.mlp.unpooler",
      "model.layers.0.mlp.experts.*",
      "model.layers." + std::to_string(config.numHiddenLayers - 1) + ".mlp.experts.*",
  };
}

std::string checkpointConfigJson(const Config &config, WeightFormat format) {
  OrderedJson root;
  root["architectures"] = {"MuseSparkForCausalLM"};
  root["model_type"] = config.modelType;
  root["vocab_size"] = config.vocabSize;
  root["hidden_size"] = config.hiddenSize;
  root["num_hidden_layers"] = config.numHiddenLayers;
  root["num_attention_heads"] = config.numAttentionHeads;
  root["num_key_value_heads"] = config.numKeyValueHeads;
  root["head_dim"] = config.headDim;
  root["sliding_window"] = config.slidingWindow;
  root["global_attention_period"] = config.globalAttentionPeriod;
  root["rope_theta"] = config.ropeTheta;
  root["max_position_embeddings"] = config.maxPositionEmbeddings;
  root["rms_norm_eps"] = config.rmsNormEps;
  root["num_experts"] = config.numExperts;
  root["num_experts_per_tok"] = config.numExpertsPerTok;
  root["moe_latent_size"] = config.moeLatentSize;
  root["moe_intermediate_size"] = config.moeIntermediateSize;
  root["tie_word_embeddings"] = config.tieWordEmbeddings;
  root["torch_dtype"] = "bfloat16";
  if (format == WeightFormat::NVFP4) {
    OrderedJson quant;
    quant["quant_method"] = "modelopt";
    quant["quant_algo"] = "NVFP4";
    quant["group_size"] = 16;
    quant["exclude_modules"] = nvfp4ExcludeModules(config);
    root["quantization_config"] = quant;
  }
  return root.dump(2) + "\n";
}

void writeSyntheticCheckpoint(const Config &config, WeightFormat format, uint64_t seed,
                              const std::string &dir, uint64_t maxShardBytes,
                              const SynthProgress &progress) {
  const std::vector<TensorSpec> manifest = checkpointManifest(config, format);
  std::vector<TensorDecl> decls;
  decls.reserve(manifest.size());
  for (const TensorSpec &spec : manifest)
    decls.push_back({spec.name, spec.dtype, spec.shape});
  auto fill = [&](size_t index, uint8_t *dst) {
    synthesizeTensor(config, manifest[index], seed, dst);
  };
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  WriteProgress writeProgress;
  if (progress)
    writeProgress = [&](uint64_t done, uint64_t total) { progress(done, total); };
  const std::vector<std::string> shards =
      writeShardedCheckpoint(dir, decls, fill, maxShardBytes, metadata, writeProgress);
  removeStaleShards(dir, shards);
  writeFileAtomically(joinPath(dir, kConfigFileName), checkpointConfigJson(config, format));
}

namespace {

// Each tensor of `files` holding non-finite values, as a problem.
void checkValues(const std::vector<const SafetensorsFile *> &files, uint64_t total,
                 const std::function<void(uint64_t, uint64_t)> &progress,
                 std::vector<std::string> &problems) {
  uint64_t done = 0;
  for (const SafetensorsFile *file : files)
    for (const TensorInfo &info : file->tensors()) {
      const ByteView bytes = file->bytes(info);
      const NonFiniteCount count = countNonFinite(info.dtype, bytes.data, bytes.size);
      if (count.any())
        problems.push_back(file->path() + ": tensor " + quoted(info.name) + " (" +
                           std::string(dtypeName(info.dtype)) + ") holds " +
                           describeNonFinite(count));
      done += bytes.size;
      if (progress)
        progress(done, total);
    }
}

} // namespace

CheckpointCheck checkCheckpoint(const std::string &path, const Config *config, bool values,
                                const std::function<void(uint64_t, uint64_t)> &progress) {
  CheckpointCheck result;
  std::map<std::string, FoundTensor> found;
  bool quantDeclared = false;
  std::optional<Config> stored;
  std::string storedSource;

  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    result.problems.push_back(path + ": no such file or directory");
    return result;
  }
  try {
    if (fs::is_directory(status)) {
      const Checkpoint checkpoint = Checkpoint::open(path);
      for (const SafetensorsFile &file : checkpoint.files())
        for (const TensorInfo &info : file.tensors())
          found[info.name] = {info.dtype, info.shape};
      result.totalBytes = checkpoint.totalBytes();
      if (values) {
        std::vector<const SafetensorsFile *> files;
        for (const SafetensorsFile &file : checkpoint.files())
          files.push_back(&file);
        checkValues(files, result.totalBytes, progress, result.problems);
      }
      storedSource = joinPath(path, kConfigFileName);
      if (fs::exists(storedSource, error)) {
        try {
          stored = loadConfig(storedSource);
          quantDeclared = stored->quantization.has_value();
        } catch (const ConfigError &configError) {
          result.problems.push_back(configError.what());
        }
      }
    } else {
      const SafetensorsFile file = SafetensorsFile::open(path);
      for (const TensorInfo &info : file.tensors()) {
        found[info.name] = {info.dtype, info.shape};
        result.totalBytes += info.size;
      }
      if (values)
        checkValues({&file}, result.totalBytes, progress, result.problems);
    }
  } catch (const std::exception &readError) {
    result.problems.push_back(readError.what());
    return result;
  }
  result.numTensors = found.size();

  bool u8Experts = false, anyExperts = false;
  for (const auto &[name, tensor] : found) {
    if (name.find(".mlp.experts.") == std::string::npos)
      continue;
    anyExperts = true;
    if (tensor.dtype == DType::U8)
      u8Experts = true;
  }
  const WeightFormat format =
      (u8Experts || quantDeclared) ? WeightFormat::NVFP4 : WeightFormat::BF16;
  result.format = format;
  if (quantDeclared && anyExperts && !u8Experts)
    result.problems.push_back(storedSource + ": declares NVFP4 quantization_config but no "
                                             "expert weight is U8");
  if (stored && u8Experts && !quantDeclared)
    result.problems.push_back(storedSource + ": has no quantization_config but expert "
                                             "weights are U8 (NVFP4)");

  if (!config)
    return result;
  if (stored)
    compareConfigs(*stored, *config, storedSource, result.problems);

  std::vector<TensorSpec> manifest;
  try {
    manifest = checkpointManifest(*config, format);
  } catch (const std::exception &manifestError) {
    result.problems.push_back(manifestError.what());
    return result;
  }
  std::set<std::string> expected;
  for (const TensorSpec &spec : manifest) {
    expected.insert(spec.name);
    auto it = found.find(spec.name);
    if (it == found.end()) {
      result.problems.push_back("missing tensor " + quoted(spec.name) + " (expected " +
                                formatShape(spec.dtype, spec.shape) + ")");
      continue;
    }
    if (it->second.dtype != spec.dtype || it->second.shape != spec.shape)
      result.problems.push_back("tensor " + quoted(spec.name) + ": expected " +
                                formatShape(spec.dtype, spec.shape) + ", got " +
                                formatShape(it->second.dtype, it->second.shape));
  }
  for (const auto &[name, tensor] : found)
    if (!expected.count(name))
      result.problems.push_back("unexpected tensor " + quoted(name) + " (" +
                                formatShape(tensor.dtype, tensor.shape) + ") for config " +
                                quoted(config->name));
  return result;
}

} // namespace kiln::muse_spark
