// One call's steps captured from the backend's stream into a HIP graph and
// instantiated: a Recording whose replay is one hipGraphLaunch. As with CUDA
// graphs (runtime/cuda/CudaGraph.h), capturing freezes each kernel node's
// parameters; update() rewrites one node's with
// hipGraphExecKernelNodeSetParams when its launch's arguments changed (the
// PastTokens scalars of a decode step).
#pragma once

#include "runtime/cuda/KernelParams.h"
#include "runtime/hip/HipBackend.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::hip {

// One kernel launch captured into the graph, with the parameter values its
// node holds.
struct CapturedLaunch {
  const PreparedLaunch *launch = nullptr; // whose arguments it takes
  hipGraphNode_t node = nullptr;
  hipFunction_t function = nullptr;
  unsigned grid = 1, block = 1;
  unsigned sharedBytes = 0; // dynamic LDS
  std::string where;        // for errors: the step, kernel and op
  cuda::KernelParams params;
};

class HipGraph final : public Recording {
public:
  // Takes ownership of `graph`, instantiated as `exec`. `backend` must
  // outlive this.
  HipGraph(HipBackend &backend, hipGraph_t graph, hipGraphExec_t exec,
           std::vector<CapturedLaunch> launches);
  ~HipGraph() override;
  HipGraph(const HipGraph &) = delete;
  HipGraph &operator=(const HipGraph &) = delete;

  void update(PreparedLaunch &launch, const LaunchCall &call) override;
  void replay() override;

  size_t numLaunches() const { return launches_.size(); }
  // Node parameter updates made so far.
  uint64_t numUpdates() const { return updates_; }

private:
  HipBackend &backend_;
  hipGraph_t graph_;
  hipGraphExec_t exec_;
  std::vector<CapturedLaunch> launches_;
  std::unordered_map<const PreparedLaunch *, size_t> byLaunch_;
  uint64_t updates_ = 0;
};

} // namespace kiln::hip
