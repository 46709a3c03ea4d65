// Which decoder layer and expert a checkpoint tensor belongs to, by Hugging
// Face's naming ("model.layers.3.mlp.experts.17.up_proj.weight"), and the
// check that a checkpoint holds none beyond a model's: a config with fewer
// layers or experts than its checkpoint would silently leave the rest unused.
// The runtime's binder and the interpreter both refuse them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// The N of "layers.N." in `name`, or -1.
int64_t decoderLayerOf(const std::string &name);
// The N of ".experts.N." in `name`, or -1.
int64_t expertOf(const std::string &name);

// Empty when every tensor of `names` in a decoder layer lies in layers
// 0..lastLayer and, when `experts` > 0, names experts 0..experts-1; else,
// for `source` (a checkpoint's description), the first that does not:
// "<source> holds '<name>' of layer 4, but the ... has layers 0..3 (...)".
// `model` says whose layers they are ("the artifact's model").
std::string tensorsBeyond(const std::vector<std::string> &names, int64_t lastLayer, int64_t experts,
                          const std::string &source, const std::string &model);

} // namespace kiln
