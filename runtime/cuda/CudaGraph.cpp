#include "runtime/cuda/CudaGraph.h"

#include <stdexcept>

namespace kiln::cuda {

CudaGraph::CudaGraph(CudaBackend &backend, CUgraph graph, CUgraphExec exec,
                     std::vector<CapturedLaunch> launches, std::vector<CollectiveMark> collectives)
    : backend_(backend), graph_(graph), exec_(exec), launches_(std::move(launches)),
      collectives_(std::move(collectives)) {
  // A launch runs once per call: one node each.
  for (size_t i = 0; i < launches_.size(); ++i)
    byLaunch_.emplace(launches_[i].launch, i);
}

CudaGraph::~CudaGraph() {
  // Errors are ignored: after a sticky error nothing can be freed anyway.
  const CudaApi &api = backend_.driver().api();
  if (backend_.abandoned())
    return;
  try {
    backend_.enter();
  } catch (const RuntimeError &) {
  }
  if (exec_)
    api.cuGraphExecDestroy(exec_);
  if (graph_)
    api.cuGraphDestroy(graph_);
  for (const CollectiveMark &mark : collectives_)
    if (api.cuEventDestroy)
      api.cuEventDestroy(mark.event);
}

void CudaGraph::update(PreparedLaunch &launch, const LaunchCall &call) {
  const auto found = byLaunch_.find(&launch);
  if (found == byLaunch_.end())
    throw std::logic_error("update of a launch the recording does not hold");
  CapturedLaunch &captured = launches_[found->second];
  backend_.refreshTensorMaps(launch, call);
  const bool changed = captured.params.pack(call.buffers, call.scalars);
  const unsigned grid = launchGrid(launch, call);
  if (!changed && grid == captured.grid)
    return;
  backend_.enter();
  KernelNodeParams params;
  params.func = captured.function;
  params.gridDimX = grid;
  params.blockDimX = captured.block;
  params.sharedMemBytes = captured.sharedBytes;
  params.kernelParams = captured.params.pointers();
  backend_.check(
      backend_.driver().api().cuGraphExecKernelNodeSetParams(exec_, captured.node, &params),
      "cuGraphExecKernelNodeSetParams", captured.where);
  captured.grid = grid;
  ++updates_;
}

void CudaGraph::replay() {
  backend_.enter();
  backend_.check(backend_.driver().api().cuGraphLaunch(exec_, backend_.stream()), "cuGraphLaunch",
                 "replaying the recorded decode step");
  backend_.replayedCollectives(collectives_);
}

} // namespace kiln::cuda
