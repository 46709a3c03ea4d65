// `synthetic:SEED` weights generated where they live: the artifact's
// synthesis kernels (targets/common/SynthesisKernels.cpp) write each binding
// in the device's memory, bit for bit what the host generator
// (SyntheticWeights.h) would upload, so a GPU needs no host
// generation and no upload of its tens of GiB. Bindings the kernels do not
// cover (a transformed layout, NVFP4 input scales) are generated on the host
// as before.
#pragma once

#include "runtime/engine/Backend.h"
#include "runtime/engine/WeightBinder.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln {

class SyntheticWeightSource;
class ThreadPool;

// Whether `artifact` carries the synthesis kernels (kilnc from schema 1.4).
bool hasSynthesisKernels(const Artifact &artifact);

// One buffer of spec.bytes per spec, in order, synthesised on `backend` as
// `source` describes its tensors (`source` also makes, on the host, what the
// kernels do not cover; checkWeights must have passed). `cpuParts`: parts per launch on a
// CPU backend. Progress counts bytes of specs done.
std::vector<DeviceMemory> synthesizeWeights(Backend &backend, const Artifact &artifact,
                                            const SyntheticWeightSource &source,
                                            const std::vector<WeightSpec> &specs, ThreadPool *pool,
                                            uint32_t cpuParts, const BindProgress &progress);

} // namespace kiln
