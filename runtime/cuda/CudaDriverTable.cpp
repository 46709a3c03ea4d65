#include "runtime/cuda/CudaDriverTable.h"

#include "runtime/cuda/NcclCollectives.h"
#include "runtime/cuda/NvptxArtifact.h"
#include "runtime/cuda/TensorMap.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace kiln {
namespace fb = kiln::artifact;

namespace cuda {
namespace {

using gpu::CallResult;

// Room for the JIT compiler's error log.
constexpr size_t kJitLogBytes = 16 * 1024;

static_assert(sizeof(TensorMap) == gpu::kTensorMapBytes);

CUstream cuStream(gpu::Stream stream) { return static_cast<CUstream>(stream); }
CUevent cuEvent(gpu::Event event) { return static_cast<CUevent>(event); }

} // namespace

CudaDriverTable::CudaDriverTable(std::shared_ptr<const CudaDriver> driver, int ordinal)
    : driver_(std::move(driver)) {
  const std::string context = "CUDA device " + std::to_string(ordinal);
  gpu::DeviceLimits &device = device_;
  device.ordinal = ordinal;
  driver_->check(api().cuDeviceGet(&handle_, ordinal), "cuDeviceGet", context);
  char name[256] = {};
  driver_->check(api().cuDeviceGetName(name, sizeof name - 1, handle_), "cuDeviceGetName", context);
  device.name = name;
  device.loadName = name;
  auto attribute = [&](int which, const char *what) {
    int value = 0;
    driver_->check(api().cuDeviceGetAttribute(&value, which, handle_), "cuDeviceGetAttribute",
                   context + ": " + what);
    return value;
  };
  major_ = attribute(kAttrComputeCapabilityMajor, "compute capability");
  minor_ = attribute(kAttrComputeCapabilityMinor, "compute capability");
  device.maxThreadsPerBlock = attribute(kAttrMaxThreadsPerBlock, "max threads per block");
  device.maxGridX = attribute(kAttrMaxGridDimX, "max grid size");
  device.multiprocessors = attribute(kAttrMultiprocessorCount, "multiprocessor count");
  device.defaultSharedBytes = kDefaultSharedBytes;
  device.maxSharedBytes = static_cast<unsigned>(
      attribute(kAttrMaxSharedMemoryPerBlockOptin, "max shared memory per block (opt-in)"));
  size_t bytes = 0;
  driver_->check(api().cuDeviceTotalMem(&bytes, handle_), "cuDeviceTotalMem_v2", context);
  device.description = device.name + " (compute capability " + std::to_string(major_) + "." +
                       std::to_string(minor_) + ", " + gpu::gibibytes(bytes) + ", device " +
                       std::to_string(ordinal) + ")";
}

void CudaDriverTable::openContext() {
  const std::string context = "device " + std::to_string(device_.ordinal);
  driver_->check(api().cuDevicePrimaryCtxRetain(&context_, handle_), "cuDevicePrimaryCtxRetain",
                 context);
}

CudaDriverTable::~CudaDriverTable() {
  if (context_)
    api().cuDevicePrimaryCtxRelease(handle_);
}

void CudaDriverTable::fail(CallResult result, const std::string &context) const {
  driver_->check(result.status, result.call, context);
  // A status the driver calls success cannot reach here.
  throw RuntimeError(context + ": " + result.call + " failed");
}

CallResult CudaDriverTable::makeCurrent() {
  return {api().cuCtxSetCurrent(context_), "cuCtxSetCurrent"};
}

CallResult CudaDriverTable::createStream(gpu::Stream *stream) {
  CUstream created = nullptr;
  const CUresult result = api().cuStreamCreate(&created, kStreamNonBlocking);
  *stream = created;
  return {result, "cuStreamCreate"};
}

void CudaDriverTable::destroyStream(gpu::Stream stream) noexcept {
  api().cuStreamSynchronize(cuStream(stream));
  api().cuStreamDestroy(cuStream(stream));
}

CallResult CudaDriverTable::allocate(DeviceAddress *address, uint64_t bytes) {
  CUdeviceptr allocated = 0;
  const CUresult result = api().cuMemAlloc(&allocated, static_cast<size_t>(bytes));
  *address = allocated;
  return {result, "cuMemAlloc_v2"};
}

void CudaDriverTable::free(DeviceAddress address) noexcept { api().cuMemFree(address); }

CallResult CudaDriverTable::upload(DeviceAddress to, const void *from, uint64_t bytes,
                                   gpu::Stream stream) {
  return {api().cuMemcpyHtoDAsync(to, from, static_cast<size_t>(bytes), cuStream(stream)),
          "cuMemcpyHtoDAsync_v2"};
}

CallResult CudaDriverTable::download(void *to, DeviceAddress from, uint64_t bytes, gpu::Stream) {
  return {api().cuMemcpyDtoH(to, from, static_cast<size_t>(bytes)), "cuMemcpyDtoH_v2"};
}

CallResult CudaDriverTable::fill(DeviceAddress to, uint8_t value, uint64_t bytes,
                                 gpu::Stream stream) {
  return {api().cuMemsetD8Async(to, value, static_cast<size_t>(bytes), cuStream(stream)),
          "cuMemsetD8Async"};
}

CallResult CudaDriverTable::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes,
                                 gpu::Stream stream) {
  return {api().cuMemcpyDtoDAsync(to, from, static_cast<size_t>(bytes), cuStream(stream)),
          "cuMemcpyDtoDAsync_v2"};
}

bool CudaDriverTable::hasCopy2D() const { return api().cuMemcpy2DAsync != nullptr; }

CallResult CudaDriverTable::copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from,
                                   uint64_t fromPitch, uint64_t width, uint64_t rows,
                                   gpu::Stream stream) {
  Memcpy2D copy;
  copy.srcMemoryType = copy.dstMemoryType = kMemoryTypeDevice;
  copy.srcDevice = from;
  copy.srcPitch = static_cast<size_t>(fromPitch);
  copy.dstDevice = to;
  copy.dstPitch = static_cast<size_t>(toPitch);
  copy.widthInBytes = static_cast<size_t>(width);
  copy.height = static_cast<size_t>(rows);
  return {api().cuMemcpy2DAsync(&copy, cuStream(stream)), "cuMemcpy2DAsync_v2"};
}

CallResult CudaDriverTable::loadModule(gpu::Module *module, const void *image, std::string *log) {
  std::vector<char> text(kJitLogBytes, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void *values[] = {text.data(), reinterpret_cast<void *>(text.size() - 1)};
  CUmodule loaded = nullptr;
  const CUresult result = api().cuModuleLoadDataEx(&loaded, image, 2, options, values);
  *module = loaded;
  *log = text.data();
  return {result, "cuModuleLoadDataEx"};
}

void CudaDriverTable::unloadModule(gpu::Module module) noexcept {
  api().cuModuleUnload(static_cast<CUmodule>(module));
}

CallResult CudaDriverTable::function(gpu::Function *function, gpu::Module module,
                                     const char *name) {
  CUfunction found = nullptr;
  const CUresult result = api().cuModuleGetFunction(&found, static_cast<CUmodule>(module), name);
  *function = found;
  return {result, "cuModuleGetFunction"};
}

CallResult CudaDriverTable::maxThreads(int *threads, gpu::Function function) {
  return {api().cuFuncGetAttribute(threads, kFuncAttrMaxThreadsPerBlock,
                                   static_cast<CUfunction>(function)),
          "cuFuncGetAttribute"};
}

CallResult CudaDriverTable::staticSharedBytes(int *bytes, gpu::Function function) {
  return {
      api().cuFuncGetAttribute(bytes, kFuncAttrSharedSizeBytes, static_cast<CUfunction>(function)),
      "cuFuncGetAttribute"};
}

CallResult CudaDriverTable::allowSharedBytes(gpu::Function function, unsigned bytes) {
  return {api().cuFuncSetAttribute(static_cast<CUfunction>(function),
                                   kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(bytes)),
          "cuFuncSetAttribute"};
}

bool CudaDriverTable::hasOccupancy() const {
  return api().cuOccupancyMaxActiveBlocksPerMultiprocessor != nullptr;
}

CallResult CudaDriverTable::blocksPerMultiprocessor(int *blocks, gpu::Function function,
                                                    unsigned block, unsigned sharedBytes) {
  return {api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
              blocks, static_cast<CUfunction>(function), static_cast<int>(block), sharedBytes),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor"};
}

bool CudaDriverTable::hasProgrammaticLaunch() const {
  // A capture's programmatic edges carry edge data, which only the v3
  // capture query reports (v2 answers CUDA_ERROR_LOSSY_QUERY).
  return api().cuLaunchKernelEx != nullptr && api().cuStreamGetCaptureInfo_v3 != nullptr;
}

CallResult CudaDriverTable::launch(const gpu::KernelNode &kernel, gpu::Stream stream) {
  if (kernel.programmatic && api().cuLaunchKernelEx) {
    LaunchAttribute attribute;
    attribute.id = kLaunchAttributeProgrammaticStreamSerialization;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    LaunchConfig config;
    config.gridDimX = kernel.grid;
    config.blockDimX = kernel.block;
    config.sharedMemBytes = kernel.sharedBytes;
    config.hStream = cuStream(stream);
    config.attrs = &attribute;
    config.numAttrs = 1;
    return {api().cuLaunchKernelEx(&config, static_cast<CUfunction>(kernel.function), kernel.params,
                                   nullptr),
            "cuLaunchKernelEx"};
  }
  return {api().cuLaunchKernel(static_cast<CUfunction>(kernel.function), kernel.grid, 1, 1,
                               kernel.block, 1, 1, kernel.sharedBytes, cuStream(stream),
                               kernel.params, nullptr),
          "cuLaunchKernel"};
}

CallResult CudaDriverTable::synchronize(gpu::Stream stream) {
  return {api().cuStreamSynchronize(cuStream(stream)), "cuStreamSynchronize"};
}

bool CudaDriverTable::hasQuery() const {
  return api().cuStreamQuery != nullptr && api().cuEventQuery != nullptr;
}

CallResult CudaDriverTable::query(gpu::Stream stream) {
  return {api().cuStreamQuery(cuStream(stream)), "cuStreamQuery"};
}

CallResult CudaDriverTable::queryEvent(gpu::Event event) {
  return {api().cuEventQuery(cuEvent(event)), "cuEventQuery"};
}

bool CudaDriverTable::hasEvents() const {
  return api().cuEventCreate && api().cuEventRecord && api().cuEventSynchronize &&
         api().cuEventElapsedTime && api().cuEventDestroy;
}

CallResult CudaDriverTable::createEvent(gpu::Event *event, bool timing) {
  CUevent created = nullptr;
  const CUresult result = api().cuEventCreate(&created, timing ? 0 : kEventDisableTiming);
  *event = created;
  return {result, "cuEventCreate"};
}

CallResult CudaDriverTable::recordEvent(gpu::Event event, gpu::Stream stream) {
  return {api().cuEventRecord(cuEvent(event), cuStream(stream)), "cuEventRecord"};
}

CallResult CudaDriverTable::waitEvent(gpu::Event event) {
  return {api().cuEventSynchronize(cuEvent(event)), "cuEventSynchronize"};
}

CallResult CudaDriverTable::elapsed(float *milliseconds, gpu::Event start, gpu::Event end) {
  return {api().cuEventElapsedTime(milliseconds, cuEvent(start), cuEvent(end)),
          "cuEventElapsedTime"};
}

void CudaDriverTable::destroyEvent(gpu::Event event) noexcept {
  if (api().cuEventDestroy)
    api().cuEventDestroy(cuEvent(event));
}

CallResult CudaDriverTable::beginCapture(gpu::Stream stream) {
  return {api().cuStreamBeginCapture(cuStream(stream), kCaptureModeThreadLocal),
          "cuStreamBeginCapture_v2"};
}

CallResult CudaDriverTable::endCapture(gpu::Stream stream, gpu::Graph *graph) {
  CUgraph captured = nullptr;
  const CUresult result = api().cuStreamEndCapture(cuStream(stream), &captured);
  *graph = captured;
  return {result, "cuStreamEndCapture"};
}

CallResult CudaDriverTable::capturedNode(gpu::Stream stream, gpu::GraphNode *node) {
  int status = 0;
  const CUgraphNode *dependencies = nullptr;
  size_t count = 0;
  CallResult result;
  if (api().cuStreamGetCaptureInfo_v3)
    result = {api().cuStreamGetCaptureInfo_v3(cuStream(stream), &status, nullptr, nullptr,
                                              &dependencies, nullptr, &count),
              "cuStreamGetCaptureInfo_v3"};
  else
    result = {api().cuStreamGetCaptureInfo_v2(cuStream(stream), &status, nullptr, nullptr,
                                              &dependencies, &count),
              "cuStreamGetCaptureInfo_v2"};
  *node = result.ok() && status == kCaptureStatusActive && count == 1 && dependencies
              ? dependencies[0]
              : nullptr;
  return result;
}

CallResult CudaDriverTable::instantiate(gpu::GraphExec *exec, gpu::Graph graph, std::string *) {
  CUgraphExec instantiated = nullptr;
  const CUresult result =
      api().cuGraphInstantiateWithFlags(&instantiated, static_cast<CUgraph>(graph), 0);
  *exec = instantiated;
  return {result, "cuGraphInstantiateWithFlags"};
}

CallResult CudaDriverTable::launchGraph(gpu::GraphExec exec, gpu::Stream stream) {
  return {api().cuGraphLaunch(static_cast<CUgraphExec>(exec), cuStream(stream)), "cuGraphLaunch"};
}

CallResult CudaDriverTable::updateKernelNode(gpu::GraphExec exec, gpu::GraphNode node,
                                             const gpu::KernelNode &kernel) {
  KernelNodeParams params;
  params.func = static_cast<CUfunction>(kernel.function);
  params.gridDimX = kernel.grid;
  params.blockDimX = kernel.block;
  params.sharedMemBytes = kernel.sharedBytes;
  params.kernelParams = kernel.params;
  return {api().cuGraphExecKernelNodeSetParams(static_cast<CUgraphExec>(exec),
                                               static_cast<CUgraphNode>(node), &params),
          "cuGraphExecKernelNodeSetParams"};
}

void CudaDriverTable::destroyGraph(gpu::Graph graph, gpu::GraphExec exec) noexcept {
  if (exec)
    api().cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
  if (graph)
    api().cuGraphDestroy(static_cast<CUgraph>(graph));
}

std::string CudaDriverTable::tensorMapsUnavailable() const {
  if (!api().cuTensorMapEncodeTiled)
    return driver_->name() +
           " lacks cuTensorMapEncodeTiled, which the launch's tensor maps need (a driver for "
           "CUDA 12.0 or newer)";
  if (major_ < 9)
    return "tensor maps need compute capability 9.0 or later; " + device_.name + ", device " +
           std::to_string(device_.ordinal) + " has " + std::to_string(major_) + "." +
           std::to_string(minor_);
  return std::string();
}

void CudaDriverTable::checkTensorMap(const TensorMapSpec &spec, int rank,
                                     const std::string &where) const {
  checkTensorMapSpec(spec, rank, where);
}

void CudaDriverTable::encodeTensorMap(void *map, const TensorMapSpec &spec,
                                      const BufferArgument &buffer,
                                      const std::string &where) const {
  const TensorMapEncoding e = cuda::encodeTensorMap(spec, buffer, where);
  TensorMap encoded{};
  driver_->check(api().cuTensorMapEncodeTiled(
                     &encoded, e.dataType, e.rank,
                     reinterpret_cast<void *>(static_cast<uintptr_t>(e.globalAddress)), e.globalDim,
                     e.globalStrides, e.boxDim, e.elementStrides, e.interleave, e.swizzle,
                     e.l2Promotion, e.oobFill),
                 "cuTensorMapEncodeTiled", where);
  std::memcpy(map, &encoded, sizeof encoded);
}

bool CudaDriverTable::hasIpc() const {
  return api().cuIpcGetMemHandle != nullptr && api().cuIpcOpenMemHandle != nullptr;
}

CallResult CudaDriverTable::getIpcHandle(void *handle, DeviceAddress address) {
  IpcMemHandle mine{};
  const CUresult result = api().cuIpcGetMemHandle(&mine, address);
  std::memcpy(handle, &mine, sizeof mine);
  return {result, "cuIpcGetMemHandle"};
}

CallResult CudaDriverTable::openIpcHandle(DeviceAddress *address, const void *handle) {
  IpcMemHandle theirs;
  std::memcpy(&theirs, handle, sizeof theirs);
  CUdeviceptr opened = 0;
  const CUresult result = api().cuIpcOpenMemHandle(&opened, theirs, kIpcLazyEnablePeerAccess);
  *address = opened;
  return {result, "cuIpcOpenMemHandle_v2"};
}

void CudaDriverTable::closeIpcHandle(DeviceAddress address) noexcept {
  if (api().cuIpcCloseMemHandle)
    api().cuIpcCloseMemHandle(address);
}

std::unique_ptr<Collectives> CudaDriverTable::connect(gpu::GpuBackend &backend,
                                                      const RankInfo &rank,
                                                      std::vector<CommGroupSpec> groups) {
  return std::make_unique<NcclCollectives>(backend, rank, std::move(groups));
}

} // namespace cuda

std::unique_ptr<gpu::GpuBackend> createCudaBackend(const Artifact &artifact, int ordinal,
                                                   const std::string &driverLibrary) {
  using namespace cuda;
  checkNvptxArtifact(artifact);
  const fb::Target &target = *artifact->target();
  const std::string forTarget = ": this artifact is for " + describeTarget(target);
  std::shared_ptr<const CudaDriver> driver;
  try {
    driver = driverLibrary == CudaDriver::kLibrary ? CudaDriver::system()
                                                   : CudaDriver::load(driverLibrary);
  } catch (const CudaUnavailable &error) {
    throw RuntimeError(artifact.source() + ": " + error.what() + forTarget);
  }
  int count = 0;
  driver->check(driver->api().cuDeviceGetCount(&count), "cuDeviceGetCount", artifact.source());
  if (count < 1)
    throw RuntimeError(artifact.source() + ": no CUDA device" + forTarget);
  if (ordinal < 0 || ordinal >= count)
    throw RuntimeError(artifact.source() + ": no CUDA device " + std::to_string(ordinal) +
                       " (this machine has " + std::to_string(count) + ", 0.." +
                       std::to_string(count - 1) + ")" + forTarget);

  auto table = std::make_unique<CudaDriverTable>(std::move(driver), ordinal);
  checkTarget(artifact, fb::TargetKind::NVPTX, [&](const fb::Target &t) {
    const std::string chip = t.chip()->str();
    // checkNvptxArtifact has parsed it.
    const std::string reason =
        nvptxChipSupport(*parseNvptxChip(chip), chip, table->major(), table->minor());
    if (reason.empty())
      return reason;
    return "device " + std::to_string(ordinal) + " (" + table->device().name +
           ") has compute capability " + std::to_string(table->major()) + "." +
           std::to_string(table->minor()) + "; " + reason;
  });
  table->openContext();
  return std::make_unique<gpu::GpuBackend>(std::move(table), artifact.source());
}

} // namespace kiln
