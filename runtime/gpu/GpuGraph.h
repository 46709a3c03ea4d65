// One call's steps captured from a GpuBackend's stream into a graph and
// instantiated: a Recording whose replay is one graph launch. Capturing
// freezes each kernel node's parameters; update() rewrites the parameters of
// one node when its launch's arguments changed (the PastTokens scalars of a
// decode step), leaving the others and the graph as they are. A node's
// tensor maps stay at their addresses: update() re-encodes and uploads those
// whose buffer changed since, ahead of the replay.
#pragma once

#include "runtime/gpu/GpuBackend.h"
#include "runtime/gpu/KernelParams.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::gpu {

// One kernel launch captured into the graph, with the parameter values its
// node holds.
struct CapturedLaunch {
  const PreparedLaunch *launch = nullptr; // whose arguments it takes
  GraphNode node = nullptr;
  Function function = nullptr;
  unsigned grid = 1, block = 1;
  unsigned sharedBytes = 0; // dynamic shared memory
  std::string where;        // for errors: the step, kernel and op
  KernelParams params;
};

class GpuGraph final : public Recording {
public:
  // Takes ownership of `graph`, instantiated as `exec`, and of the
  // collectives' events. `backend` must outlive this.
  GpuGraph(GpuBackend &backend, Graph graph, GraphExec exec, std::vector<CapturedLaunch> launches,
           std::vector<CollectiveMark> collectives = {});
  ~GpuGraph() override;
  GpuGraph(const GpuGraph &) = delete;
  GpuGraph &operator=(const GpuGraph &) = delete;

  void update(PreparedLaunch &launch, const LaunchCall &call) override;
  void replay() override;

  size_t numLaunches() const { return launches_.size(); }
  // Node parameter updates made so far.
  uint64_t numUpdates() const { return updates_; }

private:
  GpuBackend &backend_;
  Graph graph_;
  GraphExec exec_;
  std::vector<CapturedLaunch> launches_;
  std::vector<CollectiveMark> collectives_; // their events are graph nodes
  std::unordered_map<const PreparedLaunch *, size_t> byLaunch_;
  uint64_t updates_ = 0;
};

} // namespace kiln::gpu
