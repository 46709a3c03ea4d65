// Deterministic synthetic weights for Muse Spark checkpoints (`synthetic:SEED`).
//
// A tensor's bytes depend only on (seed, tensor name, config), never on the
// order in which tensors are produced, so a runtime can generate any one
// tensor without files and get exactly the bytes the checkpoint writer wrote.
//
// Random stream. Each module has a key
//   key = mix64(fnv1a64(streamName) ^ mix64(seed ^ 0x6b696c6e))
// where streamName is the tensor name without a trailing ".weight" (for NVFP4
// pieces, without ".weight", ".weight_scale", ".weight_scale_2" or
// ".input_scale"), so the BF16 and NVFP4 checkpoints of one seed share the
// values of every expert projection. mix64 is the splitmix64 finaliser and
// word n of the stream is mix64(key + (n + 1) * 0x9e3779b97f4a7c15), so
// element i can be computed on its own: it reads words 2i and 2i+1.
//
// Normal deviates. The eight 16-bit lanes of those two words are summed
// (Irwin-Hall, an integer K), and z = (2K - 524280) / 131072 * sqrt(1.5) in
// double: mean 0, variance 1, tails cut at +-4.9. An element is
//   double v = mean + stddev * z;  then rounded to f32, then to bf16 (RNE)
// with stddev = std::sqrt(c / fanIn) in double. Only IEEE-exact operations
// are involved, so every platform produces the same bits.
//
// Distributions (fanIn = the `in` dimension of an [out, in] weight):
//   model.embed_tokens            N(0, 1): embedded tokens have RMS ~1
//   *norm.weight (all RMSNorms)   1 + 0.05 N(0, 1)
//   attn/mlp_residual_gate        0.45 + 0.05 N(0, 1): a residual stream of
//                                 RMS 1 grows to about sqrt(1 + 2 L 0.2)
//   q/k/v/o, pooler, unpooler,    N(0, 1/fanIn): an RMS-1 input gives RMS ~1
//   expert gate/up/down           outputs
//   mlp.router                    N(0, 2.25/fanIn): logits of std 1.5 on
//                                 RMS-1 inputs; for E=16 the top-1
//                                 probability averages ~0.3 (neither uniform
//                                 1/16 nor one-hot)
//   lm_head                       N(0, 1/H)
// NVFP4 expert projections quantise (quantizeNvfp4) the f32 values of the
// bf16 matrix above: `weight`, `weight_scale` and `weight_scale_2` come from
// that; `input_scale` is the fixed activation scale kSyntheticInputAmax /
// (6 * 448), i.e. activations assumed to stay within +-8 (RMS-1 normalised
// inputs; unused by W4A16 on Hopper).
#pragma once

#include "models/muse_spark/Config.h"
#include "models/muse_spark/WeightManifest.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::muse_spark {

// Assumed activation amax behind every synthetic `input_scale`.
constexpr float kSyntheticInputAmax = 8.0f;

// Writes exactly the tensor's byte size (elements of spec.dtype, little
// endian) to `out`. Throws std::invalid_argument for a tensor whose name
// this scheme does not know.
void synthesizeTensor(const Config &config, const TensorSpec &spec, uint64_t seed, uint8_t *out);

// The module name whose stream feeds `tensorName` (see above).
std::string syntheticStreamName(std::string_view tensorName);

// Element `index` of the N(0, 1) stream of `streamName` (as a double, before
// scaling and rounding).
double syntheticNormal(std::string_view streamName, uint64_t seed, uint64_t index);

// What a generator elsewhere (the runtime's device kernels) needs to make
// the same bytes: a stream's key; a BF16 tensor's distribution; an NVFP4
// piece's module, its [out, in] and the distribution quantised (mean 0,
// stddev 1/sqrt(in)). Throw std::invalid_argument as synthesizeTensor does.
struct SyntheticDistribution {
  double mean = 0;
  double stddev = 1;
};
uint64_t syntheticStreamKey(std::string_view streamName, uint64_t seed);
SyntheticDistribution syntheticDistribution(const Config &config, const TensorSpec &spec);
struct SyntheticNvfp4Module {
  int64_t rows = 0, cols = 0;
  SyntheticDistribution distribution;
};
SyntheticNvfp4Module syntheticNvfp4Module(const Config &config, const TensorSpec &spec);

} // namespace kiln::muse_spark
