#include "runtime/gpu/GpuGraph.h"

#include <stdexcept>

namespace kiln::gpu {

GpuGraph::GpuGraph(GpuBackend &backend, Graph graph, GraphExec exec,
                   std::vector<CapturedLaunch> launches, std::vector<CollectiveMark> collectives)
    : backend_(backend), graph_(graph), exec_(exec), launches_(std::move(launches)),
      collectives_(std::move(collectives)) {
  // A launch runs once per call: one node each.
  for (size_t i = 0; i < launches_.size(); ++i)
    byLaunch_.emplace(launches_[i].launch, i);
}

GpuGraph::~GpuGraph() {
  // Errors are ignored: after a sticky error nothing can be freed anyway.
  if (backend_.abandoned())
    return;
  try {
    backend_.enter();
  } catch (const RuntimeError &) {
  }
  DriverTable &table = backend_.table();
  table.destroyGraph(graph_, exec_);
  for (const CollectiveMark &mark : collectives_)
    table.destroyEvent(mark.event);
}

void GpuGraph::update(PreparedLaunch &launch, const LaunchCall &call) {
  const auto found = byLaunch_.find(&launch);
  if (found == byLaunch_.end())
    throw std::logic_error("update of a launch the recording does not hold");
  CapturedLaunch &captured = launches_[found->second];
  backend_.refreshTensorMaps(launch, call);
  const bool changed = captured.params.pack(call.buffers, call.scalars);
  const unsigned grid = GpuBackend::gridOf(launch, call);
  if (!changed && grid == captured.grid)
    return;
  backend_.enter();
  const KernelNode node{captured.function, grid, captured.block, captured.sharedBytes,
                        captured.params.pointers()};
  backend_.check(backend_.table().updateKernelNode(exec_, captured.node, node), captured.where);
  captured.grid = grid;
  ++updates_;
}

void GpuGraph::replay() {
  backend_.enter();
  backend_.check(backend_.table().launchGraph(exec_, backend_.stream()),
                 "replaying the recorded decode step");
  backend_.replayedCollectives(collectives_);
}

} // namespace kiln::gpu
