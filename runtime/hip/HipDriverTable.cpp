#include "runtime/hip/HipDriverTable.h"

#include "runtime/hip/AmdgcnArtifact.h"

#include <cstdio>
#include <cstring>
#include <limits>

namespace kiln {
namespace fb = kiln::artifact;

namespace hip {
namespace {

using gpu::CallResult;

void *pointer(DeviceAddress address) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(address));
}

// A fixed-size char array's text, up to its first NUL (or all of it).
std::string text(const char *chars, size_t size) {
  return std::string(chars, ::strnlen(chars, size));
}

hipStream_t hipStream(gpu::Stream stream) { return static_cast<hipStream_t>(stream); }

} // namespace

HipDriverTable::HipDriverTable(std::shared_ptr<const HipDriver> driver, int ordinal,
                               const std::string &source)
    : driver_(std::move(driver)) {
  const std::string context = "AMD GPU " + std::to_string(ordinal);
  gpu::DeviceLimits &device = device_;
  device.ordinal = ordinal;
  driver_->check(api().hipSetDevice(ordinal), "hipSetDevice", context);
  DeviceProperties properties;
  driver_->check(driver_->properties(ordinal, properties), "hipGetDeviceProperties", context);
  device.name = text(properties.name, sizeof properties.name);
  if (device.name.empty())
    device.name = "AMD GPU";
  gcnArchName_ = text(properties.gcnArchName, sizeof properties.gcnArchName);
  // A runtime whose hipDeviceProp_t is not HIP 5's would leave something
  // else here; refuse rather than compare the chip against it.
  if (gcnArchName_.rfind("gfx", 0) != 0 || gcnArchName_.size() == sizeof properties.gcnArchName)
    throw RuntimeError(source + ": " + context +
                       ": hipGetDeviceProperties gave no gfx architecture name (this "
                       "runtime reads HIP 5's hipDeviceProp_t, which the HIP runtime " +
                       driver_->versionText() + " (" + driver_->library() +
                       ") does not seem to keep)");
  auto attribute = [&](int which, const char *what) {
    int value = 0;
    driver_->check(api().hipDeviceGetAttribute(&value, which, ordinal), "hipDeviceGetAttribute",
                   context + ": " + what);
    return value;
  };
  device.maxThreadsPerBlock = attribute(kAttrMaxThreadsPerBlock, "max threads per block");
  device.maxGridX = attribute(kAttrMaxGridDimX, "max grid size");
  warpSize_ = attribute(kAttrWarpSize, "wavefront size");
  // HIP launches a grid of work-items, blocks times threads along x,
  // counted in 32 bits.
  device.maxThreadsAlongX = std::numeric_limits<uint32_t>::max();
  device.multiprocessors = properties.multiProcessorCount;
  // LDS: a workgroup may have all of it without asking.
  device.defaultSharedBytes = device.maxSharedBytes =
      static_cast<unsigned>(properties.sharedMemPerBlock);
  device.loadName = device.name + " (" + gcnArchName_ + ")";
  device.description = device.name + " (" + gcnArchName_ + ", " +
                       std::to_string(device.multiprocessors) + " compute units, " +
                       gpu::gibibytes(properties.totalGlobalMem) + ", device " +
                       std::to_string(ordinal) + ")";
}

void HipDriverTable::fail(CallResult result, const std::string &context) const {
  driver_->check(result.status, result.call, context);
  // A status the runtime calls success cannot reach here.
  throw RuntimeError(context + ": " + result.call + " failed");
}

CallResult HipDriverTable::makeCurrent() {
  return {api().hipSetDevice(device_.ordinal), "hipSetDevice"};
}

CallResult HipDriverTable::createStream(gpu::Stream *stream) {
  hipStream_t created = nullptr;
  const hipError_t result = api().hipStreamCreateWithFlags(&created, kStreamNonBlocking);
  *stream = created;
  return {result, "hipStreamCreateWithFlags"};
}

void HipDriverTable::destroyStream(gpu::Stream stream) noexcept {
  api().hipStreamSynchronize(hipStream(stream));
  api().hipStreamDestroy(hipStream(stream));
}

CallResult HipDriverTable::allocate(DeviceAddress *address, uint64_t bytes) {
  void *allocated = nullptr;
  const hipError_t result = api().hipMalloc(&allocated, static_cast<size_t>(bytes));
  *address = static_cast<DeviceAddress>(reinterpret_cast<uintptr_t>(allocated));
  return {result, "hipMalloc"};
}

void HipDriverTable::free(DeviceAddress address) noexcept { api().hipFree(pointer(address)); }

CallResult HipDriverTable::upload(DeviceAddress to, const void *from, uint64_t bytes,
                                  gpu::Stream stream) {
  const hipError_t copied = api().hipMemcpyAsync(pointer(to), from, static_cast<size_t>(bytes),
                                                 kMemcpyHostToDevice, hipStream(stream));
  if (copied != kSuccess)
    return {copied, "hipMemcpyAsync (host to device)"};
  return {api().hipStreamSynchronize(hipStream(stream)), "hipStreamSynchronize"};
}

CallResult HipDriverTable::download(void *to, DeviceAddress from, uint64_t bytes,
                                    gpu::Stream stream) {
  const hipError_t copied = api().hipMemcpyAsync(to, pointer(from), static_cast<size_t>(bytes),
                                                 kMemcpyDeviceToHost, hipStream(stream));
  if (copied != kSuccess)
    return {copied, "hipMemcpyAsync (device to host)"};
  return {api().hipStreamSynchronize(hipStream(stream)), "hipStreamSynchronize"};
}

CallResult HipDriverTable::fill(DeviceAddress to, uint8_t value, uint64_t bytes,
                                gpu::Stream stream) {
  return {api().hipMemsetAsync(pointer(to), value, static_cast<size_t>(bytes), hipStream(stream)),
          "hipMemsetAsync"};
}

CallResult HipDriverTable::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes,
                                gpu::Stream stream) {
  return {api().hipMemcpyAsync(pointer(to), pointer(from), static_cast<size_t>(bytes),
                               kMemcpyDeviceToDevice, hipStream(stream)),
          "hipMemcpyAsync (device to device)"};
}

CallResult HipDriverTable::loadModule(gpu::Module *module, const void *image, std::string *) {
  hipModule_t loaded = nullptr;
  const hipError_t result = api().hipModuleLoadData(&loaded, image);
  *module = loaded;
  return {result, "hipModuleLoadData"};
}

void HipDriverTable::unloadModule(gpu::Module module) noexcept {
  api().hipModuleUnload(static_cast<hipModule_t>(module));
}

CallResult HipDriverTable::function(gpu::Function *function, gpu::Module module, const char *name) {
  hipFunction_t found = nullptr;
  const hipError_t result =
      api().hipModuleGetFunction(&found, static_cast<hipModule_t>(module), name);
  *function = found;
  return {result, "hipModuleGetFunction"};
}

CallResult HipDriverTable::maxThreads(int *threads, gpu::Function function) {
  return {api().hipFuncGetAttribute(threads, kFuncAttrMaxThreadsPerBlock,
                                    static_cast<hipFunction_t>(function)),
          "hipFuncGetAttribute"};
}

CallResult HipDriverTable::staticSharedBytes(int *bytes, gpu::Function) {
  // Kiln's amdgcn kernels declare no static LDS.
  *bytes = 0;
  return {kSuccess, "hipFuncGetAttribute"};
}

CallResult HipDriverTable::allowSharedBytes(gpu::Function, unsigned) {
  // All of a workgroup's LDS is allowed without asking.
  return {kSuccess, "hipFuncSetAttribute"};
}

CallResult HipDriverTable::launch(const gpu::KernelNode &kernel, gpu::Stream stream) {
  return {api().hipModuleLaunchKernel(static_cast<hipFunction_t>(kernel.function), kernel.grid, 1,
                                      1, kernel.block, 1, 1, kernel.sharedBytes, hipStream(stream),
                                      kernel.params, nullptr),
          "hipModuleLaunchKernel"};
}

CallResult HipDriverTable::synchronize(gpu::Stream stream) {
  return {api().hipStreamSynchronize(hipStream(stream)), "hipStreamSynchronize"};
}

CallResult HipDriverTable::beginCapture(gpu::Stream stream) {
  return {api().hipStreamBeginCapture(hipStream(stream), kCaptureModeThreadLocal),
          "hipStreamBeginCapture"};
}

CallResult HipDriverTable::endCapture(gpu::Stream stream, gpu::Graph *graph) {
  hipGraph_t captured = nullptr;
  const hipError_t result = api().hipStreamEndCapture(hipStream(stream), &captured);
  *graph = captured;
  return {result, "hipStreamEndCapture"};
}

CallResult HipDriverTable::capturedNode(gpu::Stream stream, gpu::GraphNode *node) {
  int status = 0;
  unsigned long long id = 0;
  hipGraph_t graph = nullptr;
  const hipGraphNode_t *dependencies = nullptr;
  size_t count = 0;
  const hipError_t result = api().hipStreamGetCaptureInfo_v2(hipStream(stream), &status, &id,
                                                             &graph, &dependencies, &count);
  *node = result == kSuccess && status == kCaptureStatusActive && count == 1 && dependencies
              ? dependencies[0]
              : nullptr;
  return {result, "hipStreamGetCaptureInfo_v2"};
}

CallResult HipDriverTable::instantiate(gpu::GraphExec *exec, gpu::Graph graph, std::string *log) {
  hipGraphExec_t instantiated = nullptr;
  hipGraphNode_t failed = nullptr;
  char text[1024] = {};
  const hipError_t result = api().hipGraphInstantiate(&instantiated, static_cast<hipGraph_t>(graph),
                                                      &failed, text, sizeof text - 1);
  *exec = instantiated;
  *log = hip::text(text, sizeof text);
  return {result, "hipGraphInstantiate"};
}

CallResult HipDriverTable::launchGraph(gpu::GraphExec exec, gpu::Stream stream) {
  return {api().hipGraphLaunch(static_cast<hipGraphExec_t>(exec), hipStream(stream)),
          "hipGraphLaunch"};
}

CallResult HipDriverTable::updateKernelNode(gpu::GraphExec exec, gpu::GraphNode node,
                                            const gpu::KernelNode &kernel) {
  KernelNodeParams params;
  params.func = kernel.function;
  params.gridDim.x = kernel.grid;
  params.blockDim.x = kernel.block;
  params.sharedMemBytes = kernel.sharedBytes;
  params.kernelParams = kernel.params;
  return {api().hipGraphExecKernelNodeSetParams(static_cast<hipGraphExec_t>(exec),
                                                static_cast<hipGraphNode_t>(node), &params),
          "hipGraphExecKernelNodeSetParams"};
}

void HipDriverTable::destroyGraph(gpu::Graph graph, gpu::GraphExec exec) noexcept {
  if (exec)
    api().hipGraphExecDestroy(static_cast<hipGraphExec_t>(exec));
  if (graph)
    api().hipGraphDestroy(static_cast<hipGraph_t>(graph));
}

} // namespace hip

std::unique_ptr<gpu::GpuBackend> createHipBackend(const Artifact &artifact, int ordinal,
                                                  const std::string &library) {
  using namespace hip;
  checkAmdgcnArtifact(artifact);
  const fb::Target &target = *artifact->target();
  const std::string forTarget = ": this artifact is for " + describeTarget(target);
  std::shared_ptr<const HipDriver> driver;
  try {
    driver = library == HipDriver::kLibrary ? HipDriver::system() : HipDriver::load(library);
  } catch (const HipUnavailable &error) {
    throw RuntimeError(artifact.source() + ": " + error.what() + forTarget);
  }
  const int count = driver->deviceCount();
  if (ordinal < 0 || ordinal >= count)
    throw RuntimeError(artifact.source() + ": no AMD GPU " + std::to_string(ordinal) +
                       " (this machine has " + std::to_string(count) + ", 0.." +
                       std::to_string(count - 1) + ")" + forTarget);

  auto table = std::make_unique<HipDriverTable>(std::move(driver), ordinal, artifact.source());
  checkTarget(artifact, fb::TargetKind::AMDGCN, [&](const fb::Target &t) {
    const std::string reason = amdgcnChipSupport(t, table->gcnArchName());
    if (reason.empty())
      return reason;
    return "device " + std::to_string(ordinal) + " (" + table->device().name + ") is " +
           table->gcnArchName() + "; " + reason;
  });
  return std::make_unique<gpu::GpuBackend>(std::move(table), artifact.source());
}

} // namespace kiln
