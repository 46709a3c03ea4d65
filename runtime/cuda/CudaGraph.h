// One call's steps captured from the backend's stream into a CUDA graph and
// instantiated: a Recording whose replay is one cuGraphLaunch. Capturing
// freezes each kernel node's parameters; update() rewrites the parameters of
// one node with cuGraphExecKernelNodeSetParams when its launch's arguments
// changed (the PastTokens scalars of a decode step), leaving the others and
// the graph as they are. A node's tensor maps stay at their addresses:
// update() re-encodes and uploads those whose buffer changed since, ahead of
// the replay.
#pragma once

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/KernelParams.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::cuda {

// One kernel launch captured into the graph, with the parameter values its
// node holds.
struct CapturedLaunch {
  const PreparedLaunch *launch = nullptr; // whose arguments it takes
  CUgraphNode node = nullptr;
  CUfunction function = nullptr;
  unsigned grid = 1, block = 1;
  unsigned sharedBytes = 0; // dynamic shared memory
  std::string where;        // for errors: the step, kernel and op
  KernelParams params;
};

class CudaGraph final : public Recording {
public:
  // Takes ownership of `graph`, instantiated as `exec`. `backend` must
  // outlive this.
  CudaGraph(CudaBackend &backend, CUgraph graph, CUgraphExec exec,
            std::vector<CapturedLaunch> launches, std::vector<CollectiveMark> collectives = {});
  ~CudaGraph() override;
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;

  void update(PreparedLaunch &launch, const LaunchCall &call) override;
  void replay() override;

  size_t numLaunches() const { return launches_.size(); }
  // Node parameter updates made so far.
  uint64_t numUpdates() const { return updates_; }

private:
  CudaBackend &backend_;
  CUgraph graph_;
  CUgraphExec exec_;
  std::vector<CapturedLaunch> launches_;
  std::vector<CollectiveMark> collectives_; // their events are graph nodes
  std::unordered_map<const PreparedLaunch *, size_t> byLaunch_;
  uint64_t updates_ = 0;
};

} // namespace kiln::cuda
