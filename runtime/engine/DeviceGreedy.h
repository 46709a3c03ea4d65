// Greedy decoding's token choice on the GPU: the artifact's greedy kernel
// (targets/common/GreedyKernel.cpp) leaves one key per row of the logits and
// only the keys come back to the host, not the rows (52 MB for 64
// conversations of Muse Spark's vocabulary). Artifacts without the kernel
// (x86, where the logits are in host memory anyway) choose on the host.
#pragma once

#include "runtime/artifact/Artifact.h"
#include "runtime/engine/Backend.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln {

class DeviceGreedy {
public:
  // Null when the artifact lacks the kernel (kilnc gives it to GPU targets
  // only).
  static std::unique_ptr<DeviceGreedy> create(Backend &backend, const Artifact &artifact,
                                              int64_t maxRows);

  // The index of the largest value of each of `rows` rows of `vocab` f32
  // logits at `logits`, as argmax() on the host chooses it: the first of
  // equal ones, NaN never (a row of NaN only: 0).
  std::vector<int32_t> choose(DeviceAddress logits, int64_t rows, int64_t vocab);

private:
  DeviceGreedy(Backend &backend, std::unique_ptr<PreparedLaunch> launch, DeviceMemory keys)
      : backend_(backend), launch_(std::move(launch)), keys_(std::move(keys)) {}
  Backend &backend_;
  std::unique_ptr<PreparedLaunch> launch_;
  DeviceMemory keys_;
};

} // namespace kiln
