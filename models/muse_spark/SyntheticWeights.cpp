// Synthetic weights: a counter-based splitmix64 stream per module, shaped into
// the distributions documented in the header.
#include "models/muse_spark/SyntheticWeights.h"

#include "runtime/core/Float.h"
#include "runtime/quant/Nvfp4.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kiln::muse_spark {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t streamKey(std::string_view streamName, uint64_t seed) {
  return mix64(fnv1a64(streamName) ^ mix64(seed ^ 0x6b696c6eull));
}

uint64_t lanes16Sum(uint64_t word) {
  return (word & 0xffff) + ((word >> 16) & 0xffff) + ((word >> 32) & 0xffff) + (word >> 48);
}

double normalAt(uint64_t key, uint64_t index) {
  const uint64_t first = mix64(key + (2 * index + 1) * kGolden);
  const uint64_t second = mix64(key + (2 * index + 2) * kGolden);
  const int64_t sum = static_cast<int64_t>(lanes16Sum(first) + lanes16Sum(second));
  // Eight uniforms (k + 0.5) / 65536 sum to (K + 4) / 65536 with mean 4 and
  // variance 8/12; centre and scale to variance 1.
  constexpr double kScale = 1.2247448713915890491 / 131072.0; // sqrt(1.5)/2^17
  return static_cast<double>(2 * sum - 524280) * kScale;
}

bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// mean + stddev * N(0, 1) for one tensor's stream.
struct Distribution {
  double mean = 0;
  double stddev = 1;
};

[[noreturn]] void unknownTensor(const TensorSpec &spec, const char *why) {
  throw std::invalid_argument("synthetic weights: tensor \"" + spec.name + "\": " + why);
}

int64_t fanIn(const TensorSpec &spec) {
  if (spec.shape.size() != 2)
    unknownTensor(spec, "expected a rank-2 [out, in] weight");
  return spec.shape[1];
}

// The distribution of a BF16 tensor, chosen by its name (see the header).
Distribution distributionFor(const Config &config, const TensorSpec &spec) {
  const std::string &name = spec.name;
  if (name == "model.embed_tokens.weight")
    return {0.0, 1.0};
  if (name == "lm_head.weight")
    return {0.0, 1.0 / std::sqrt(static_cast<double>(config.hiddenSize))};
  if (endsWith(name, "_residual_gate"))
    return {0.45, 0.05};
  if (endsWith(name, "norm.weight")) {
    if (spec.shape.size() != 1)
      unknownTensor(spec, "expected a rank-1 norm weight");
    return {1.0, 0.05};
  }
  if (endsWith(name, ".mlp.router.weight"))
    return {0.0, std::sqrt(2.25 / static_cast<double>(fanIn(spec)))};
  if (endsWith(name, ".weight"))
    return {0.0, 1.0 / std::sqrt(static_cast<double>(fanIn(spec)))};
  unknownTensor(spec, "no synthetic distribution for this name");
}

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

float sampleF32(uint64_t key, uint64_t index, const Distribution &dist) {
  return static_cast<float>(dist.mean + dist.stddev * normalAt(key, index));
}

void storeU16(uint8_t *out, int64_t index, uint16_t value) {
  out[2 * index] = static_cast<uint8_t>(value & 0xff);
  out[2 * index + 1] = static_cast<uint8_t>(value >> 8);
}

void storeF32(uint8_t *out, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<uint8_t>(bits >> (8 * i));
}

const char *const kNvfp4Suffixes[] = {".weight_scale_2", ".weight_scale", ".input_scale",
                                      ".weight"};

// The quantised form of one NVFP4 module. The four tensors of a module are
// written one after another, so a one-entry cache per thread quantises each
// module once.
struct QuantCache {
  bool valid = false;
  uint64_t seed = 0;
  std::string stream;
  int64_t rows = 0, cols = 0;
  Nvfp4Matrix matrix;
};

const Nvfp4Matrix &quantizedModule(const std::string &stream, uint64_t seed, int64_t rows,
                                   int64_t cols) {
  thread_local QuantCache cache;
  if (cache.valid && cache.seed == seed && cache.stream == stream && cache.rows == rows &&
      cache.cols == cols)
    return cache.matrix;
  cache.valid = false;
  const uint64_t key = streamKey(stream, seed);
  const Distribution dist{0.0, 1.0 / std::sqrt(static_cast<double>(cols))};
  // Reused: a fresh 64 MiB buffer per module spends most of its time having
  // the kernel zero pages.
  thread_local std::vector<float> values;
  values.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = bf16ToFloat(floatToBf16(sampleF32(key, i, dist)));
  cache.matrix = quantizeNvfp4(values.data(), rows, cols);
  cache.seed = seed;
  cache.stream = stream;
  cache.rows = rows;
  cache.cols = cols;
  cache.valid = true;
  return cache.matrix;
}

// [out, in] of an NVFP4 expert projection, from its module name.
std::pair<int64_t, int64_t> nvfp4ModuleShape(const Config &config, const TensorSpec &spec,
                                             const std::string &stream) {
  const int64_t latent = config.moeLatentSize;
  const int64_t inter = config.moeIntermediateSize;
  if (endsWith(stream, ".gate_proj") || endsWith(stream, ".up_proj"))
    return {inter, latent};
  if (endsWith(stream, ".down_proj"))
    return {latent, inter};
  unknownTensor(spec, "NVFP4 is only defined for expert projections");
}

void synthesizeNvfp4Piece(const Config &config, const TensorSpec &spec, uint64_t seed,
                          uint8_t *out) {
  const std::string stream = syntheticStreamName(spec.name);
  const auto [rows, cols] = nvfp4ModuleShape(config, spec, stream);
  // The dtype and byte count this piece needs, so that a manifest of another
  // shape can never overrun `out`.
  DType dtype = DType::F32;
  int64_t bytes = 4;
  if (endsWith(spec.name, ".weight_scale")) {
    dtype = DType::F8_E4M3;
    bytes = rows * cols / 16;
  } else if (endsWith(spec.name, ".weight")) {
    dtype = DType::U8;
    bytes = rows * cols / 2;
  }
  if (spec.dtype != dtype || elementCount(spec.shape) * dtypeSize(spec.dtype) != bytes)
    unknownTensor(spec, "dtype or shape does not match the NVFP4 layout of "
                        "the config");
  if (endsWith(spec.name, ".input_scale")) {
    storeF32(out, kSyntheticInputAmax / (6.0f * 448.0f));
    return;
  }
  const Nvfp4Matrix &matrix = quantizedModule(stream, seed, rows, cols);
  if (endsWith(spec.name, ".weight_scale_2"))
    storeF32(out, matrix.globalScale);
  else if (endsWith(spec.name, ".weight_scale"))
    std::memcpy(out, matrix.scales.data(), matrix.scales.size());
  else
    std::memcpy(out, matrix.packed.data(), matrix.packed.size());
}

} // namespace

std::string syntheticStreamName(std::string_view tensorName) {
  for (const char *suffix : kNvfp4Suffixes)
    if (endsWith(tensorName, suffix))
      return std::string(tensorName.substr(0, tensorName.size() - std::strlen(suffix)));
  return std::string(tensorName);
}

double syntheticNormal(std::string_view streamName, uint64_t seed, uint64_t index) {
  return normalAt(streamKey(streamName, seed), index);
}

uint64_t syntheticStreamKey(std::string_view streamName, uint64_t seed) {
  return streamKey(streamName, seed);
}

SyntheticDistribution syntheticDistribution(const Config &config, const TensorSpec &spec) {
  const Distribution dist = distributionFor(config, spec);
  return {dist.mean, dist.stddev};
}

SyntheticNvfp4Module syntheticNvfp4Module(const Config &config, const TensorSpec &spec) {
  const auto [rows, cols] = nvfp4ModuleShape(config, spec, syntheticStreamName(spec.name));
  return {rows, cols, {0.0, 1.0 / std::sqrt(static_cast<double>(cols))}};
}

void synthesizeTensor(const Config &config, const TensorSpec &spec, uint64_t seed, uint8_t *out) {
  switch (spec.dtype) {
  case DType::BF16: {
    const Distribution dist = distributionFor(config, spec);
    const uint64_t key = streamKey(syntheticStreamName(spec.name), seed);
    const int64_t count = elementCount(spec.shape);
    for (int64_t i = 0; i < count; ++i)
      storeU16(out, i, floatToBf16(sampleF32(key, i, dist)));
    return;
  }
  case DType::U8:
  case DType::F8_E4M3:
  case DType::F32:
    synthesizeNvfp4Piece(config, spec, seed, out);
    return;
  default:
    unknownTensor(spec, "unsupported dtype for synthetic weights");
  }
}

} // namespace kiln::muse_spark
