#include "runtime/hip/HipGraph.h"

#include <stdexcept>

namespace kiln::hip {

HipGraph::HipGraph(HipBackend &backend, hipGraph_t graph, hipGraphExec_t exec,
                   std::vector<CapturedLaunch> launches)
    : backend_(backend), graph_(graph), exec_(exec), launches_(std::move(launches)) {
  // A launch runs once per call: one node each.
  for (size_t i = 0; i < launches_.size(); ++i)
    byLaunch_.emplace(launches_[i].launch, i);
}

HipGraph::~HipGraph() {
  // Errors are ignored: after an error nothing may be freeable anyway.
  const HipApi &api = backend_.driver().api();
  try {
    backend_.enter();
  } catch (const RuntimeError &) {
  }
  if (exec_)
    api.hipGraphExecDestroy(exec_);
  if (graph_)
    api.hipGraphDestroy(graph_);
}

void HipGraph::update(PreparedLaunch &launch, const LaunchCall &call) {
  const auto found = byLaunch_.find(&launch);
  if (found == byLaunch_.end())
    throw std::logic_error("update of a launch the recording does not hold");
  CapturedLaunch &captured = launches_[found->second];
  const bool changed = captured.params.pack(call.buffers, call.scalars);
  const auto grid = static_cast<unsigned>(call.grid);
  if (!changed && grid == captured.grid)
    return;
  backend_.enter();
  KernelNodeParams params;
  params.func = captured.function;
  params.gridDim.x = grid;
  params.blockDim.x = captured.block;
  params.sharedMemBytes = captured.sharedBytes;
  params.kernelParams = captured.params.pointers();
  backend_.check(
      backend_.driver().api().hipGraphExecKernelNodeSetParams(exec_, captured.node, &params),
      "hipGraphExecKernelNodeSetParams", captured.where);
  captured.grid = grid;
  ++updates_;
}

void HipGraph::replay() {
  backend_.enter();
  backend_.check(backend_.driver().api().hipGraphLaunch(exec_, backend_.stream()), "hipGraphLaunch",
                 "replaying the recorded decode step");
}

} // namespace kiln::hip
