// The per-tensor scales of an FP8 KV cache (model card section 3: "FP8 E4M3
// KV cache, per-tensor scale"): one for each layer's keys and one for its
// values, as the serving stacks read them from an FP8-calibrated checkpoint
// (`model.layers.{i}.self_attn.k_scale` and `v_scale`). A key x is held as
// the e4m3 code of x / k_scale and read back as that code times k_scale.
//
// The scales file is JSON with exactly those names as keys, every layer's
// two, each a positive finite number:
//   {"model.layers.0.self_attn.k_scale": 0.0125,
//    "model.layers.0.self_attn.v_scale": 0.004, ...}
// `kiln-interp --calibrate-kv-scales FILE` writes one (each tensor's largest
// magnitude over a run, over 448, the e4m3 maximum).
#pragma once

#include "models/muse_spark/Config.h"

#include <string>
#include <vector>

namespace kiln::muse_spark {

struct KvScale {
  double keys = 1, values = 1;
};

// The largest finite e4m3 magnitude.
constexpr double kE4m3Max = 448;

// The checkpoint names of layer `layer`'s two scales.
std::string keyScaleName(int64_t layer);
std::string valueScaleName(int64_t layer);

// Reads a scales file for `config`'s layers. Throws ConfigError naming the
// file and the key: not JSON, not an object, a name that is no layer's scale,
// a layer's scale missing, a value not a positive finite number.
std::vector<KvScale> readKvScales(const std::string &path, const Config &config);

// The scales file text for `scales` (one per layer, in layer order), keys
// sorted as JSON objects print them, every number as it reads back exactly.
std::string kvScalesJson(const std::vector<KvScale> &scales);

} // namespace kiln::muse_spark
