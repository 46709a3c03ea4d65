// Turns an artifact's weight bindings into the bytes its kernels read: finds
// each checkpoint tensor (or expert stack), checks its dtype and shape, takes
// the tensor-parallel piece, applies the transform and lays the result out in
// one 64-byte aligned buffer per binding (docs/runtime-abi.md, "Weights").
#pragma once

#include "runtime/core/DType.h"
#include "runtime/cpu/AlignedBuffer.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

class ThreadPool;
class WeightSource;

enum class WeightTransform : uint8_t { None = 0, VnniBf16 = 1 };

// One artifact WeightBinding, plus the TP piece this process keeps.
struct WeightSpec {
  std::string name;   // with "{e}": an expert stack
  uint32_t stack = 0; // experts in the stack; 0: a single tensor
  uint32_t firstExpert = 0;
  std::vector<int64_t> shape; // one tensor's, as the checkpoint stores it
  DType dtype = DType::BF16;
  WeightTransform transform = WeightTransform::None;
  int32_t sliceDim = -1; // -1: no slice
  int32_t sliceCount = 1;
  // Which piece to keep. The schema has no field for it: the engine passes
  // the artifact rank modulo sliceCount (one artifact per rank, and a rank's
  // coordinate along its TP group is the rank itself while tp == world).
  int32_t sliceIndex = 0;
  uint64_t bytes = 0; // after slice and transform, all of the stack
};

// The checkpoint tensor names of a spec: the name itself, or "{e}" replaced
// by firstExpert .. firstExpert + stack - 1.
std::vector<std::string> tensorNames(const WeightSpec &spec);

// Checks every spec against itself (slice and transform make sense, `bytes`
// adds up) and against the source (every tensor present with the spec's
// dtype and shape). Throws RuntimeError naming the first offending tensor,
// with what was expected and what was found.
void checkWeights(const std::vector<WeightSpec> &specs, const WeightSource &source);

// Refuses a source holding decoder-layer tensors ("layers.N." in the name)
// of a layer past the last that `modelSpecs` (the whole model's bindings,
// every rank's experts) name, or of an expert ("experts.N.") past their
// experts: the artifact was compiled from a config with fewer layers or
// experts than the checkpoint's, whose rest would silently go unused. Other
// tensors the artifact does not read (NVFP4 input scales, a vision tower)
// are the checkpoint's business.
void checkDecoderTensors(const std::vector<WeightSpec> &modelSpecs, const WeightSource &source);

// Bytes done out of the total; called from one thread at a time.
using BindProgress = std::function<void(uint64_t done, uint64_t total)>;

// A BindProgress that writes a line to `out` at each tenth of the total:
// "loading weights:  30% of 71.3 GiB (2 s)", seconds since it was made.
BindProgress progressLines(std::FILE *out);

// checkWeights, then one buffer of spec.bytes per spec. Tensors are produced
// in parallel on `pool` when given.
std::vector<AlignedBuffer> bindWeights(const std::vector<WeightSpec> &specs,
                                       const WeightSource &source, ThreadPool *pool = nullptr,
                                       const BindProgress &progress = {});

} // namespace kiln
