// The stand-in HIP runtime (FakeHip.h): the entry points HipDriver resolves,
// with the signatures it declares (runtime/hip/HipDriver.h).
#include "test/unit/runtime_hip/FakeHip.h"

#include "runtime/hip/HipDriver.h"

#include <cstring>
#include <memory>
#include <set>

using kiln::hip::DeviceProperties;
using kiln::hip::hipError_t;
using kiln::hip::hipFunction_t;
using kiln::hip::hipGraph_t;
using kiln::hip::hipGraphExec_t;
using kiln::hip::hipGraphNode;
using kiln::hip::hipGraphNode_t;
using kiln::hip::hipModule_t;
using kiln::hip::hipStream_t;
using kiln::hip::KernelNodeParams;
using kiln::hip_test::FakeHip;
using kiln::hip_test::FakeLaunch;

namespace {

constexpr hipError_t kSuccess = 0;
constexpr hipError_t kInvalidValue = 1;
constexpr hipError_t kInvalidDevice = 101;
constexpr hipError_t kInvalidImage = 200;
constexpr hipError_t kInvalidHandle = 400;
constexpr hipError_t kNotFound = 500;
constexpr hipError_t kCaptureUnsupported = 900;

FakeHip &state() {
  static FakeHip fake;
  return fake;
}

} // namespace

// The handles, defined here for the fake only.
namespace kiln::hip {

struct ihipModuleSymbol_t {
  std::string name;
  int numParams = 0;
};

struct ihipModule_t {
  std::vector<std::unique_ptr<ihipModuleSymbol_t>> functions;
};

// One operation of a graph.
struct hipGraphNode {
  enum Kind { Launch, Copy, Fill } kind = Launch;
  ihipModuleSymbol_t *function = nullptr;
  unsigned grid = 0, block = 0, shared = 0;
  std::vector<uint64_t> values;
  void *to = nullptr;
  const void *from = nullptr;
  int value = 0;
  size_t bytes = 0;
};

struct ihipGraph {
  std::vector<std::unique_ptr<hipGraphNode>> nodes;
};

struct hipGraphExec {
  std::vector<hipGraphNode> nodes;
  std::vector<const hipGraphNode *> sources; // the graph's node of each
};

struct ihipStream_t {
  ihipGraph *capture = nullptr; // while capturing
  hipGraphNode_t last = nullptr;
};

} // namespace kiln::hip

namespace {

std::set<void *> &allocations() {
  static std::set<void *> live;
  return live;
}

std::vector<uint64_t> readParams(void **params, int count) {
  std::vector<uint64_t> values(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i)
    std::memcpy(&values[i], params[i], sizeof(uint64_t));
  return values;
}

void run(const hipGraphNode &node, bool replayed) {
  switch (node.kind) {
  case hipGraphNode::Launch:
    state().launches.push_back(
        FakeLaunch{node.function->name, node.grid, node.block, node.values, replayed, node.shared});
    break;
  case hipGraphNode::Copy:
    std::memmove(node.to, node.from, node.bytes);
    break;
  case hipGraphNode::Fill:
    std::memset(node.to, node.value, node.bytes);
    break;
  }
}

// Runs `node` now, or adds it to the stream's capture.
hipError_t issue(hipStream_t stream, hipGraphNode node) {
  if (!stream)
    return kInvalidHandle;
  if (!stream->capture) {
    run(node, false);
    return kSuccess;
  }
  stream->capture->nodes.push_back(std::make_unique<hipGraphNode>(node));
  stream->last = stream->capture->nodes.back().get();
  return kSuccess;
}

} // namespace

extern "C" {

FakeHip *kilnFakeHip() { return &state(); }

hipError_t hipInit(unsigned) { return state().initResult; }

hipError_t hipRuntimeGetVersion(int *version) {
  *version = 50221153; // HIP 5.2.21153
  return kSuccess;
}

const char *hipGetErrorName(hipError_t error) {
  switch (error) {
  case 0:
    return "hipSuccess";
  case 1:
    return "hipErrorInvalidValue";
  case 2:
    return "hipErrorOutOfMemory";
  case 100:
    return "hipErrorNoDevice";
  case 101:
    return "hipErrorInvalidDevice";
  case 200:
    return "hipErrorInvalidImage";
  case 209:
    return "hipErrorNoBinaryForGpu";
  case 400:
    return "hipErrorInvalidHandle";
  case 500:
    return "hipErrorNotFound";
  case 719:
    return "hipErrorLaunchFailure";
  case 900:
    return "hipErrorStreamCaptureUnsupported";
  }
  return "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t error) {
  // Like HIP 5.2, mostly the name again; one with a text of its own.
  return error == 719 ? "unspecified launch failure" : hipGetErrorName(error);
}

hipError_t hipGetDeviceCount(int *count) {
  *count = state().deviceCount;
  return state().deviceCount > 0 ? kSuccess : 100;
}

hipError_t hipSetDevice(int ordinal) {
  return ordinal >= 0 && ordinal < state().deviceCount ? kSuccess : kInvalidDevice;
}

hipError_t hipGetDeviceProperties(void *properties, int ordinal) {
  if (ordinal < 0 || ordinal >= state().deviceCount)
    return kInvalidDevice;
  // HIP 5.2's struct is 792 bytes: all of it is written.
  std::memset(properties, 0x5a, 792);
  DeviceProperties fields;
  std::memset(&fields, 0, sizeof fields);
  std::strncpy(fields.name, state().name.c_str(), sizeof fields.name - 1);
  std::strncpy(fields.gcnArchName, state().gcnArchName.c_str(), sizeof fields.gcnArchName - 1);
  fields.totalGlobalMem = state().memoryBytes;
  fields.multiProcessorCount = state().computeUnits;
  fields.warpSize = state().warpSize;
  fields.maxThreadsPerBlock = state().maxThreadsPerBlock;
  fields.maxGridSize[0] = state().maxGridX;
  fields.sharedMemPerBlock = state().sharedBytesPerBlock;
  std::memcpy(properties, &fields, sizeof fields);
  return kSuccess;
}

hipError_t hipDeviceGetAttribute(int *value, int attribute, int ordinal) {
  if (ordinal < 0 || ordinal >= state().deviceCount)
    return kInvalidDevice;
  switch (attribute) {
  case kiln::hip::kAttrMaxThreadsPerBlock:
    *value = state().maxThreadsPerBlock;
    return kSuccess;
  case kiln::hip::kAttrMaxGridDimX:
    *value = state().maxGridX;
    return kSuccess;
  case kiln::hip::kAttrWarpSize:
    *value = state().warpSize;
    return kSuccess;
  }
  return kInvalidValue;
}

hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
  const auto *bytes = static_cast<const uint8_t *>(image);
  if (std::memcmp(bytes,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return kInvalidImage;
  if (state().moduleLoadResult != kSuccess)
    return state().moduleLoadResult;
  state().loadedImage.assign(bytes, bytes + 64);
  *module = new kiln::hip::ihipModule_t();
  return kSuccess;
}

hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *name) {
  if (!module)
    return kInvalidHandle;
  const auto found = state().kernels.find(name);
  if (found == state().kernels.end())
    return kNotFound;
  module->functions.push_back(std::make_unique<kiln::hip::ihipModuleSymbol_t>(
      kiln::hip::ihipModuleSymbol_t{found->first, found->second}));
  *function = module->functions.back().get();
  return kSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
  delete module;
  return kSuccess;
}

hipError_t hipFuncGetAttribute(int *value, int attribute, hipFunction_t function) {
  if (!function)
    return kInvalidHandle;
  if (attribute != kiln::hip::kFuncAttrMaxThreadsPerBlock)
    return kInvalidValue;
  *value = state().kernelMaxThreads;
  return kSuccess;
}

hipError_t hipMalloc(void **address, size_t bytes) {
  *address = ::operator new(bytes);
  allocations().insert(*address);
  ++state().liveAllocations;
  return kSuccess;
}

hipError_t hipFree(void *address) {
  if (allocations().erase(address) == 0)
    return kInvalidValue;
  ::operator delete(address);
  --state().liveAllocations;
  return kSuccess;
}

hipError_t hipMemcpyAsync(void *to, const void *from, size_t bytes, int kind, hipStream_t stream) {
  if (kind < 1 || kind > 3)
    return kInvalidValue;
  if (stream && stream->capture && kind != kiln::hip::kMemcpyDeviceToDevice)
    return kCaptureUnsupported; // host memory in a graph: not here
  hipGraphNode node;
  node.kind = hipGraphNode::Copy;
  node.to = to;
  node.from = from;
  node.bytes = bytes;
  return issue(stream, node);
}

hipError_t hipMemsetAsync(void *to, int value, size_t bytes, hipStream_t stream) {
  hipGraphNode node;
  node.kind = hipGraphNode::Fill;
  node.to = to;
  node.value = value;
  node.bytes = bytes;
  return issue(stream, node);
}

hipError_t hipModuleLaunchKernel(hipFunction_t function, unsigned gridX, unsigned gridY,
                                 unsigned gridZ, unsigned blockX, unsigned blockY, unsigned blockZ,
                                 unsigned sharedMemBytes, hipStream_t stream, void **kernelParams,
                                 void **extra) {
  if (!function || gridY != 1 || gridZ != 1 || blockY != 1 || blockZ != 1 ||
      sharedMemBytes > state().sharedBytesPerBlock || extra || !kernelParams)
    return kInvalidValue;
  if (state().launchResult != kSuccess)
    return state().launchResult;
  hipGraphNode node;
  node.function = function;
  node.grid = gridX;
  node.block = blockX;
  node.shared = sharedMemBytes;
  node.values = readParams(kernelParams, function->numParams);
  return issue(stream, node);
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned flags) {
  if (flags != kiln::hip::kStreamNonBlocking)
    return kInvalidValue;
  *stream = new kiln::hip::ihipStream_t();
  return kSuccess;
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  delete stream;
  return kSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  if (!stream)
    return kInvalidHandle;
  return stream->capture ? kCaptureUnsupported : kSuccess;
}

hipError_t hipStreamBeginCapture(hipStream_t stream, int mode) {
  if (!stream || stream->capture || mode != kiln::hip::kCaptureModeThreadLocal)
    return kInvalidValue;
  stream->capture = new kiln::hip::ihipGraph();
  stream->last = nullptr;
  ++state().graphsAlive;
  return kSuccess;
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *graph) {
  if (!stream || !stream->capture)
    return kInvalidValue;
  *graph = stream->capture;
  stream->capture = nullptr;
  stream->last = nullptr;
  return kSuccess;
}

hipError_t hipStreamGetCaptureInfo_v2(hipStream_t stream, int *status, unsigned long long *id,
                                      hipGraph_t *graph, const hipGraphNode_t **dependencies,
                                      size_t *numDependencies) {
  if (!stream || !status)
    return kInvalidValue;
  *status = stream->capture ? kiln::hip::kCaptureStatusActive : 0;
  if (id)
    *id = 1;
  if (graph)
    *graph = stream->capture;
  if (dependencies)
    *dependencies = stream->last ? &stream->last : nullptr;
  if (numDependencies)
    *numDependencies = stream->last ? 1 : 0;
  return kSuccess;
}

hipError_t hipGraphInstantiate(hipGraphExec_t *exec, hipGraph_t graph, hipGraphNode_t *, char *,
                               size_t) {
  if (!exec || !graph)
    return kInvalidValue;
  auto *made = new kiln::hip::hipGraphExec();
  for (const auto &node : graph->nodes) {
    made->nodes.push_back(*node);
    made->sources.push_back(node.get());
  }
  *exec = made;
  return kSuccess;
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream) {
  if (!exec || !stream || stream->capture)
    return kInvalidValue;
  for (const hipGraphNode &node : exec->nodes)
    run(node, true);
  return kSuccess;
}

hipError_t hipGraphExecKernelNodeSetParams(hipGraphExec_t exec, hipGraphNode_t node,
                                           const KernelNodeParams *params) {
  if (!exec || !params)
    return kInvalidValue;
  for (size_t i = 0; i < exec->nodes.size(); ++i) {
    if (exec->sources[i] != node)
      continue;
    hipGraphNode &target = exec->nodes[i];
    if (target.kind != hipGraphNode::Launch || params->func != target.function || params->extra ||
        !params->kernelParams)
      return kInvalidValue;
    target.grid = params->gridDim.x;
    target.block = params->blockDim.x;
    target.shared = params->sharedMemBytes;
    target.values = readParams(params->kernelParams, target.function->numParams);
    ++state().nodeUpdates;
    return kSuccess;
  }
  return kInvalidValue;
}

hipError_t hipGraphExecDestroy(hipGraphExec_t exec) {
  delete exec;
  return kSuccess;
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
  delete graph;
  --state().graphsAlive;
  return kSuccess;
}

} // extern "C"
