#include "runtime/cuda/CudaBackend.h"

#include "runtime/cuda/NcclCollectives.h"

#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/KernelParams.h"
#include "runtime/cuda/NvptxArtifact.h"
#include "runtime/cuda/TensorMap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kiln {
namespace fb = kiln::artifact;

namespace cuda {
namespace {

// Room for the JIT compiler's error log.
constexpr size_t kJitLogBytes = 16 * 1024;

// Device memory of one tensor map: a CUtensorMap, 64-byte aligned.
constexpr uint64_t kTensorMapBytes = sizeof(TensorMap);
static_assert(kTensorMapBytes == 128);

// A tensor map of a launch and what it was last encoded from: it is encoded
// and uploaded again only when its buffer's address or sizes change.
struct LaunchTensorMap {
  TensorMapSpec spec;
  DeviceAddress device = 0; // its CUtensorMap in device memory
  bool encoded = false;
  DeviceAddress address = 0;
  int64_t sizes[memref::kMaxRank] = {};
};

// A launch: its kernel and the storage of its parameters.
class CudaLaunch final : public PreparedLaunch {
public:
  CudaLaunch(CUfunction kernel, unsigned threads, std::string step, KernelParams storage,
             unsigned resident, unsigned shared)
      : function(kernel), block(threads), where(std::move(step)), params(std::move(storage)),
        maxGrid(resident), sharedBytes(shared) {}

  CUfunction function;
  unsigned block;
  std::string where;
  KernelParams params;
  unsigned maxGrid;     // persistent kernels: the blocks resident at once; else 0
  unsigned sharedBytes; // dynamic shared memory of every call
  // It waits for other ranks' stores (peer exchange): watched as a
  // collective, under this name; empty if not.
  std::string exchange;
  // Its tensor maps, in one allocation of kTensorMapBytes each.
  std::vector<LaunchTensorMap> maps;
  DeviceMemory mapMemory;
};

// "tensor_maps[1] (over buffers[0])", for messages.
std::string mapName(size_t index, const TensorMapSpec &spec) {
  return "tensor_maps[" + std::to_string(index) + "] (over buffers[" + std::to_string(spec.buffer) +
         "])";
}

// The driver's log on one line: lines joined with "; ".
std::string oneLine(const char *log) {
  std::string text;
  for (const char *c = log; *c; ++c) {
    if (*c == '\n' || *c == '\r') {
      if (!text.empty() && text.back() != ' ')
        text += "; ";
    } else {
      text += *c;
    }
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == ';'))
    text.pop_back();
  return text;
}

std::string gibibytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

bool launchBlocking() {
  const char *value = std::getenv("CUDA_LAUNCH_BLOCKING");
  return value && std::strcmp(value, "1") == 0;
}

} // namespace

std::unique_ptr<CudaBackend> CudaBackend::create(const Artifact &artifact, int ordinal,
                                                 const std::string &driverLibrary) {
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

  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(driver), artifact.source()));
  backend->openDevice(ordinal);
  const DeviceInfo &device = backend->device_;
  checkTarget(artifact, fb::TargetKind::NVPTX, [&](const fb::Target &t) {
    const std::string chip = t.chip()->str();
    // checkNvptxArtifact has parsed it.
    const std::string reason =
        nvptxChipSupport(*parseNvptxChip(chip), chip, device.major, device.minor);
    if (reason.empty())
      return reason;
    return "device " + std::to_string(device.ordinal) + " (" + device.name +
           ") has compute capability " + std::to_string(device.major) + "." +
           std::to_string(device.minor) + "; " + reason;
  });
  backend->openContext();
  return backend;
}

void CudaBackend::openDevice(int ordinal) {
  const CudaApi &api = driver_->api();
  const std::string context = "CUDA device " + std::to_string(ordinal);
  device_.ordinal = ordinal;
  check(api.cuDeviceGet(&handle_, ordinal), "cuDeviceGet", context);
  char name[256] = {};
  check(api.cuDeviceGetName(name, sizeof name - 1, handle_), "cuDeviceGetName", context);
  device_.name = name;
  auto attribute = [&](int which, const char *what) {
    int value = 0;
    check(api.cuDeviceGetAttribute(&value, which, handle_), "cuDeviceGetAttribute",
          context + ": " + what);
    return value;
  };
  device_.major = attribute(kAttrComputeCapabilityMajor, "compute capability");
  device_.minor = attribute(kAttrComputeCapabilityMinor, "compute capability");
  device_.maxThreadsPerBlock = attribute(kAttrMaxThreadsPerBlock, "max threads per block");
  device_.maxGridX = attribute(kAttrMaxGridDimX, "max grid size");
  size_t bytes = 0;
  check(api.cuDeviceTotalMem(&bytes, handle_), "cuDeviceTotalMem_v2", context);
  device_.memoryBytes = bytes;
}

void CudaBackend::openContext() {
  const CudaApi &api = driver_->api();
  const std::string context = "device " + std::to_string(device_.ordinal);
  check(api.cuDevicePrimaryCtxRetain(&context_, handle_), "cuDevicePrimaryCtxRetain", context);
  check(api.cuCtxSetCurrent(context_), "cuCtxSetCurrent", context);
  check(api.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate", context);
}

CudaBackend::~CudaBackend() {
  // Errors are ignored: after a sticky error nothing can be freed anyway.
  const CudaApi &api = driver_->api();
  if (!context_ || abandoned_)
    return;
  api.cuCtxSetCurrent(context_);
  if (stream_) {
    api.cuStreamSynchronize(stream_);
    api.cuStreamDestroy(stream_);
  }
  for (const CollectiveMark &mark : inFlight_)
    if (!mark.recorded)
      spareEvents_.push_back(mark.event);
  for (CUevent event : spareEvents_)
    if (api.cuEventDestroy)
      api.cuEventDestroy(event);
  if (module_)
    api.cuModuleUnload(module_);
  for (CUdeviceptr peer : peerMemory_)
    if (api.cuIpcCloseMemHandle)
      api.cuIpcCloseMemHandle(peer);
  api.cuDevicePrimaryCtxRelease(handle_);
}

std::string CudaBackend::description() const {
  return device_.name + " (compute capability " + std::to_string(device_.major) + "." +
         std::to_string(device_.minor) + ", " + gibibytes(device_.memoryBytes) + ", device " +
         std::to_string(device_.ordinal) + ")";
}

void CudaBackend::enter() {
  if (!stopped_.empty())
    throw RuntimeError("an earlier CUDA error stopped this engine: " + stopped_);
  check(driver_->api().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

void CudaBackend::check(CUresult result, std::string_view call, const std::string &context) {
  if (result == kSuccess)
    return;
  try {
    driver_->check(result, call, context);
  } catch (const RuntimeError &error) {
    if (stopped_.empty())
      stopped_ = error.what();
    throw;
  }
}

DeviceAddress CudaBackend::allocate(uint64_t bytes, const std::string &what) {
  if (bytes == 0)
    return 0;
  enter();
  CUdeviceptr address = 0;
  check(driver_->api().cuMemAlloc(&address, static_cast<size_t>(bytes)), "cuMemAlloc_v2",
        source_ + ": " + what + " (" + std::to_string(bytes) + " bytes on " + device_.name +
            ", device " + std::to_string(device_.ordinal) + ")");
  fill(address, 0, bytes);
  return address;
}

void CudaBackend::release(DeviceAddress address) noexcept {
  if (!address || abandoned_)
    return;
  const CudaApi &api = driver_->api();
  api.cuCtxSetCurrent(context_);
  api.cuMemFree(address);
}

void CudaBackend::upload(DeviceAddress to, const void *from, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(driver_->api().cuMemcpyHtoDAsync(to, from, static_cast<size_t>(bytes), stream_),
        "cuMemcpyHtoDAsync_v2", source_);
}

void CudaBackend::download(void *to, DeviceAddress from, uint64_t bytes) {
  synchronize();
  if (bytes == 0)
    return;
  check(driver_->api().cuMemcpyDtoH(to, from, static_cast<size_t>(bytes)), "cuMemcpyDtoH_v2",
        source_);
}

void CudaBackend::fill(DeviceAddress to, uint8_t value, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(driver_->api().cuMemsetD8Async(to, value, static_cast<size_t>(bytes), stream_),
        "cuMemsetD8Async", source_);
}

void CudaBackend::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(driver_->api().cuMemcpyDtoDAsync(to, from, static_cast<size_t>(bytes), stream_),
        "cuMemcpyDtoDAsync_v2", source_);
}

void CudaBackend::loadKernels(const Artifact &artifact) {
  if (artifact.numKernels() == 0)
    return;
  enter();
  const CudaApi &api = driver_->api();
  // The PTX text, NUL-terminated (the artifact checks).
  const auto *blob = artifact->library()->blob();
  std::vector<char> log(kJitLogBytes, '\0');
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size() - 1)};
  const CUresult loaded = api.cuModuleLoadDataEx(&module_, blob->data(), 2, options, values);
  if (loaded != kSuccess) {
    module_ = nullptr;
    const std::string text = oneLine(log.data());
    check(loaded, "cuModuleLoadDataEx",
          source_ + ": loading the PTX module for " + describeTarget(*artifact->target()) + " on " +
              device_.name + (text.empty() ? std::string() : " (" + text + ")"));
  }
  for (const fb::Kernel *kernel : *artifact->kernels()) {
    CUfunction function = nullptr;
    const std::string name = kernel->name()->str();
    check(api.cuModuleGetFunction(&function, module_, name.c_str()), "cuModuleGetFunction",
          source_ + ": kernel '" + name + "' (not in the PTX module?)");
    functions_.push_back(function);
    kernelNames_.push_back(name);
    const std::string tiling = kernel->tiling() ? kernel->tiling()->str() : std::string();
    persistent_.push_back(tiling.find("\"kind\": \"persistent\"") != std::string::npos);
    exchanges_.push_back(tiling.find("\"exchange\": \"peer\"") != std::string::npos);
    sharedLimits_.push_back(allowSharedBytes(function, name, kernel->shared_bytes()));
  }
}

unsigned CudaBackend::allowSharedBytes(CUfunction function, const std::string &name,
                                       unsigned bytes) {
  if (bytes == 0)
    return kDefaultSharedBytes;
  const CudaApi &api = driver_->api();
  const std::string where = source_ + ": kernel '" + name + "'";
  int statics = 0;
  check(api.cuFuncGetAttribute(&statics, kFuncAttrSharedSizeBytes, function), "cuFuncGetAttribute",
        where + ": static shared memory");
  // Without asking, static and dynamic shared memory share 48 KiB.
  if (bytes + static_cast<unsigned>(statics) <= kDefaultSharedBytes)
    return kDefaultSharedBytes;
  int limit = 0;
  check(api.cuDeviceGetAttribute(&limit, kAttrMaxSharedMemoryPerBlockOptin, handle_),
        "cuDeviceGetAttribute", where + ": max shared memory per block (opt-in)");
  if (uint64_t{bytes} + static_cast<uint64_t>(statics) > static_cast<uint64_t>(limit))
    throw RuntimeError(where + " needs " + std::to_string(bytes) +
                       " bytes of dynamic shared memory (Kernel.shared_bytes) and " +
                       std::to_string(statics) + " static; " + device_.name + ", device " +
                       std::to_string(device_.ordinal) + " gives a block at most " +
                       std::to_string(limit));
  check(
      api.cuFuncSetAttribute(function, kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(bytes)),
      "cuFuncSetAttribute",
      where + ": allowing " + std::to_string(bytes) + " bytes of dynamic shared memory");
  return bytes;
}

std::unique_ptr<PreparedLaunch> CudaBackend::prepare(const LaunchSpec &spec) {
  enter();
  const std::string where = source_ + ": " + spec.where;
  for (fb::ScalarKind kind : spec.scalarKinds)
    if (kind == fb::ScalarKind::Part || kind == fb::ScalarKind::Parts)
      throw RuntimeError(where + ": GPU launches take no Part or Parts scalar");
  const CUfunction function = functions_.at(spec.kernel);
  const std::string onDevice = device_.name + ", device " + std::to_string(device_.ordinal);
  if (spec.block < 1 || spec.block > static_cast<uint32_t>(device_.maxThreadsPerBlock))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) + " threads; " +
                       onDevice + " allows 1.." + std::to_string(device_.maxThreadsPerBlock));
  int kernelMax = 0;
  check(driver_->api().cuFuncGetAttribute(&kernelMax, kFuncAttrMaxThreadsPerBlock, function),
        "cuFuncGetAttribute", where);
  if (spec.block > static_cast<uint32_t>(kernelMax))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) +
                       " threads, but the compiled kernel takes at most " +
                       std::to_string(kernelMax) + " on " + onDevice +
                       " (registers or shared memory)");
  if (spec.maxGrid > device_.maxGridX)
    throw RuntimeError(where + ": a grid of " + std::to_string(spec.maxGrid) +
                       " blocks at max_tokens; " + onDevice + " allows at most " +
                       std::to_string(device_.maxGridX));
  if (spec.sharedBytes > sharedLimits_.at(spec.kernel))
    throw RuntimeError(where + ": " + std::to_string(spec.sharedBytes) +
                       " bytes of dynamic shared memory, but kernel '" +
                       kernelNames_.at(spec.kernel) + "' was loaded for at most " +
                       std::to_string(sharedLimits_.at(spec.kernel)) +
                       " (its Kernel.shared_bytes)");
  // A persistent kernel's blocks wait for each other: all of them must be
  // resident at once, so its grid stays within what the SMs hold (its loops
  // stride over the work, whatever the grid).
  unsigned resident = 0;
  const bool exchanges = exchanges_.at(spec.kernel);
  if (persistent_.at(spec.kernel)) {
    const CudaApi &api = driver_->api();
    if (!api.cuOccupancyMaxActiveBlocksPerMultiprocessor)
      throw RuntimeError(where + ": the CUDA driver lacks "
                                 "cuOccupancyMaxActiveBlocksPerMultiprocessor, which "
                                 "persistent kernels need");
    int perSm = 0, sms = 0;
    check(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(
              &perSm, function, static_cast<int>(spec.block), spec.sharedBytes),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor", where);
    check(api.cuDeviceGetAttribute(&sms, kAttrMultiprocessorCount, handle_), "cuDeviceGetAttribute",
          where + ": multiprocessor count");
    if (perSm < 1 || sms < 1)
      throw RuntimeError(where + ": no block of " + std::to_string(spec.block) +
                         " threads of this persistent kernel fits on an SM of " + onDevice);
    resident = static_cast<unsigned>(perSm * sms);
  }
  auto launch = std::make_unique<CudaLaunch>(function, spec.block, spec.where,
                                             KernelParams(spec.ranks, spec.scalarKinds.size()),
                                             resident, spec.sharedBytes);
  if (exchanges)
    launch->exchange =
        "peer exchange for '" + kernelNames_.at(spec.kernel) + "' (" + spec.where + ")";
  prepareTensorMaps(*launch, spec);
  return launch;
}

void CudaBackend::prepareTensorMaps(PreparedLaunch &prepared, const LaunchSpec &spec) {
  auto &launch = static_cast<CudaLaunch &>(prepared);
  const bool scalars = std::find(spec.scalarKinds.begin(), spec.scalarKinds.end(),
                                 fb::ScalarKind::TensorMap) != spec.scalarKinds.end();
  if (spec.tensorMaps.empty() && !scalars)
    return;
  const std::string where = source_ + ": " + spec.where;
  if (spec.tensorMaps.empty())
    throw RuntimeError(where + ": TensorMap scalars, but the launch has no tensor_maps");
  if (!driver_->api().cuTensorMapEncodeTiled)
    throw RuntimeError(where + ": " + driver_->name() +
                       " lacks cuTensorMapEncodeTiled, which the launch's tensor maps need "
                       "(a driver for CUDA 12.0 or newer)");
  if (device_.major < 9)
    throw RuntimeError(where + ": tensor maps need compute capability 9.0 or later; " +
                       device_.name + ", device " + std::to_string(device_.ordinal) + " has " +
                       std::to_string(device_.major) + "." + std::to_string(device_.minor));
  for (size_t m = 0; m < spec.tensorMaps.size(); ++m) {
    const TensorMapSpec &map = spec.tensorMaps[m];
    if (map.buffer >= spec.ranks.size())
      throw RuntimeError(where + ": " + mapName(m, map) + ": the launch has " +
                         std::to_string(spec.ranks.size()) + " buffers");
    checkTensorMapSpec(map, spec.ranks[map.buffer], where + ": " + mapName(m, map));
  }
  launch.mapMemory = DeviceMemory::allocate(*this, kTensorMapBytes * spec.tensorMaps.size(),
                                            spec.where + ": tensor maps");
  std::vector<uint64_t> addresses;
  for (size_t m = 0; m < spec.tensorMaps.size(); ++m) {
    LaunchTensorMap map;
    map.spec = spec.tensorMaps[m];
    map.device = launch.mapMemory.address() + m * kTensorMapBytes;
    addresses.push_back(map.device);
    launch.maps.push_back(std::move(map));
  }
  launch.params.mapTensorMaps(spec.scalarKinds, std::move(addresses));
}

void CudaBackend::refreshTensorMaps(PreparedLaunch &prepared, const LaunchCall &call) {
  auto &launch = static_cast<CudaLaunch &>(prepared);
  for (size_t m = 0; m < launch.maps.size(); ++m) {
    LaunchTensorMap &map = launch.maps[m];
    const BufferArgument &buffer = call.buffers[map.spec.buffer];
    if (map.encoded && map.address == buffer.address &&
        std::equal(buffer.sizes, buffer.sizes + buffer.rank, map.sizes))
      continue;
    const std::string where = source_ + ": " + launch.where + ": " + mapName(m, map.spec);
    enter();
    // A recorded step keeps the map's address, not its contents: the map
    // must hold at every replay what the recorded call saw.
    if (capture_)
      throw RuntimeError(where + ": its buffer's address or sizes changed while the decode "
                                 "step was being recorded as a CUDA graph (a map is encoded "
                                 "before a recording, never during one)");
    const TensorMapEncoding e = encodeTensorMap(map.spec, buffer, where);
    TensorMap encoded{};
    // A map the driver refuses leaves the context as it was: no stop.
    driver_->check(driver_->api().cuTensorMapEncodeTiled(
                       &encoded, e.dataType, e.rank,
                       reinterpret_cast<void *>(static_cast<uintptr_t>(e.globalAddress)),
                       e.globalDim, e.globalStrides, e.boxDim, e.elementStrides, e.interleave,
                       e.swizzle, e.l2Promotion, e.oobFill),
                   "cuTensorMapEncodeTiled", where);
    // Ordered before the launch on the stream; the driver has read
    // `encoded` (pageable memory) when the call returns.
    check(driver_->api().cuMemcpyHtoDAsync(map.device, &encoded, kTensorMapBytes, stream_),
          "cuMemcpyHtoDAsync_v2", where);
    map.encoded = true;
    map.address = buffer.address;
    std::copy(buffer.sizes, buffer.sizes + buffer.rank, map.sizes);
  }
}

void CudaBackend::launch(PreparedLaunch &prepared, const LaunchCall &call) {
  auto &launch = static_cast<CudaLaunch &>(prepared);
  enter();
  refreshTensorMaps(prepared, call);
  launch.params.pack(call.buffers, call.scalars);
  const unsigned grid = launchGrid(prepared, call);
  check(driver_->api().cuLaunchKernel(launch.function, grid, 1, 1, launch.block, 1, 1,
                                      launch.sharedBytes, stream_, launch.params.pointers(),
                                      nullptr),
        "cuLaunchKernel", source_ + ": " + launch.where);
  if (capture_)
    capture_->push_back(CapturedLaunch{&prepared, capturedNode(), launch.function, grid,
                                       launch.block, launch.sharedBytes, launch.where,
                                       launch.params});
  // A kernel that waits for the other ranks stalls as a collective would
  // when one of them dies: the watchdog names it.
  if (!launch.exchange.empty() && nccl_)
    markCollective(launch.exchange);
}

unsigned launchGrid(const PreparedLaunch &prepared, const LaunchCall &call) {
  const auto &launch = static_cast<const CudaLaunch &>(prepared);
  const auto grid = static_cast<unsigned>(call.grid);
  return launch.maxGrid ? std::min(grid, launch.maxGrid) : grid;
}

std::vector<DeviceAddress> CudaBackend::sharePeerMemory(Collectives &comm, int group, int index,
                                                        int size, DeviceAddress local,
                                                        uint64_t bytes, const std::string &what) {
  enter();
  const CudaApi &api = driver_->api();
  if (!api.cuIpcGetMemHandle || !api.cuIpcOpenMemHandle)
    throw RuntimeError(what + ": the CUDA driver lacks cuIpcGetMemHandle/cuIpcOpenMemHandle, "
                              "which the MegaMoE exchange needs (or rebuild with kilnc "
                              "--moe-exchange=collective)");
  IpcMemHandle mine{};
  check(api.cuIpcGetMemHandle(&mine, local), "cuIpcGetMemHandle",
        what + " (" + std::to_string(bytes) + " bytes)");
  // The handles travel by the group's own all-gather (16 words each).
  const uint64_t handleBytes = sizeof(IpcMemHandle);
  const DeviceAddress staging = allocate(handleBytes * (size + 1), what + ": IPC handles");
  std::vector<IpcMemHandle> handles(static_cast<size_t>(size));
  try {
    upload(staging, &mine, handleBytes);
    comm.allGather(group, staging, staging + handleBytes, handleBytes / 4,
                   "all_gather of IPC handles for " + what);
    synchronize();
    download(handles.data(), staging + handleBytes, handleBytes * handles.size());
  } catch (...) {
    release(staging);
    throw;
  }
  release(staging);
  std::vector<DeviceAddress> addresses(static_cast<size_t>(size));
  for (int m = 0; m < size; ++m) {
    if (m == index) {
      addresses[m] = local;
      continue;
    }
    CUdeviceptr peer = 0;
    check(api.cuIpcOpenMemHandle(&peer, handles[m], kIpcLazyEnablePeerAccess),
          "cuIpcOpenMemHandle_v2",
          what + ": member " + std::to_string(m) + "'s memory on device " +
              std::to_string(device_.ordinal) +
              " (the GPUs need peer access, such as NVLink; or rebuild with kilnc "
              "--moe-exchange=collective)");
    peerMemory_.push_back(peer);
    addresses[m] = peer;
  }
  return addresses;
}

CUgraphNode CudaBackend::capturedNode() {
  const CudaApi &api = driver_->api();
  int status = 0;
  const CUgraphNode *dependencies = nullptr;
  size_t count = 0;
  if (api.cuStreamGetCaptureInfo_v3)
    check(api.cuStreamGetCaptureInfo_v3(stream_, &status, nullptr, nullptr, &dependencies, nullptr,
                                        &count),
          "cuStreamGetCaptureInfo_v3", source_);
  else
    check(api.cuStreamGetCaptureInfo_v2(stream_, &status, nullptr, nullptr, &dependencies, &count),
          "cuStreamGetCaptureInfo_v2", source_);
  // In a stream's capture the last operation is the one node that the next
  // depends on.
  if (status != kCaptureStatusActive || count != 1 || !dependencies)
    throw RuntimeError(source_ + ": recording the decode step: the stream "
                                 "capture lost track of a launch");
  return dependencies[0];
}

void CudaBackend::copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
                         uint64_t width, uint64_t rows) {
  if (!driver_->api().cuMemcpy2DAsync)
    return Backend::copy2D(to, toPitch, from, fromPitch, width, rows);
  if (width == 0 || rows == 0)
    return;
  enter();
  Memcpy2D copy;
  copy.srcMemoryType = copy.dstMemoryType = kMemoryTypeDevice;
  copy.srcDevice = from;
  copy.srcPitch = static_cast<size_t>(fromPitch);
  copy.dstDevice = to;
  copy.dstPitch = static_cast<size_t>(toPitch);
  copy.widthInBytes = static_cast<size_t>(width);
  copy.height = static_cast<size_t>(rows);
  check(driver_->api().cuMemcpy2DAsync(&copy, stream_), "cuMemcpy2DAsync_v2", source_);
}

std::unique_ptr<Collectives> CudaBackend::connect(const RankInfo &rank,
                                                  std::vector<CommGroupSpec> groups,
                                                  uint64_t /*capacityBytes*/) {
  auto collectives = std::make_unique<NcclCollectives>(*this, rank, std::move(groups));
  nccl_ = collectives.get();
  return collectives;
}

void CudaBackend::forgetCollectives(const NcclCollectives *collectives) {
  if (nccl_ == collectives)
    nccl_ = nullptr;
}

void CudaBackend::markCollective(const std::string &what) {
  const CudaApi &api = driver_->api();
  if (!api.cuEventCreate || !api.cuEventRecord || !api.cuEventQuery)
    return;
  CollectiveMark mark;
  mark.what = what;
  mark.recorded = captureMarks_ != nullptr;
  if (!mark.recorded && !spareEvents_.empty()) {
    mark.event = spareEvents_.back();
    spareEvents_.pop_back();
  } else {
    check(api.cuEventCreate(&mark.event, kEventDisableTiming), "cuEventCreate", what);
  }
  check(api.cuEventRecord(mark.event, stream_), "cuEventRecord", what);
  (captureMarks_ ? *captureMarks_ : inFlight_).push_back(std::move(mark));
}

void CudaBackend::replayedCollectives(const std::vector<CollectiveMark> &marks) {
  inFlight_.insert(inFlight_.end(), marks.begin(), marks.end());
}

void CudaBackend::watchCollectives() {
  const CudaApi &api = driver_->api();
  if (!nccl_ || inFlight_.empty() || !api.cuStreamQuery)
    return;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(nccl_->timeoutSeconds());
  auto lastCheck = start;
  for (uint64_t polls = 0;; ++polls) {
    const CUresult state = api.cuStreamQuery(stream_);
    if (state != kErrorNotReady)
      return; // done, or a kernel's error for cuStreamSynchronize to report
    const auto now = Clock::now();
    std::string reason;
    if (now - lastCheck > std::chrono::milliseconds(20)) {
      lastCheck = now;
      reason = nccl_->asyncError();
      if (reason.empty() && now > deadline) {
        char text[96];
        std::snprintf(text, sizeof(text),
                      "timed out after %g s (a rank died or stalls; "
                      "KILN_COMM_TIMEOUT)",
                      nccl_->timeoutSeconds());
        reason = text;
      }
    }
    if (!reason.empty()) {
      // The first collective whose event has not fired. A recorded step's
      // events still hold the previous replay's state, so there the stuck
      // one cannot be told apart: the step's collectives are named whole.
      std::string stuck;
      size_t replayed = 0;
      for (const CollectiveMark &mark : inFlight_) {
        replayed += mark.recorded;
        if (!mark.recorded && api.cuEventQuery(mark.event) == kErrorNotReady) {
          stuck = mark.what;
          break;
        }
      }
      if (stuck.empty())
        stuck = replayed
                    ? "one of the " + std::to_string(replayed) +
                          " collectives of a recorded step (the first: " + inFlight_.front().what +
                          ")"
                    : "the step's collectives";
      // NCCL's abort waits for the CUDA graphs that hold its work, whose
      // kernels wait for the lost peer: it runs on a thread of its own, and
      // this backend waits for and frees nothing more.
      abandoned_ = true;
      std::thread(nccl_->abortTask()).detach();
      stopped_ = stuck + ": " + reason + " (the NCCL communicators are being aborted)";
      throw CollectiveError(stopped_);
    }
    if (polls > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaBackend::synchronize() {
  enter();
  watchCollectives();
  for (CollectiveMark &mark : inFlight_)
    if (!mark.recorded)
      spareEvents_.push_back(mark.event);
  inFlight_.clear();
  check(driver_->api().cuStreamSynchronize(stream_), "cuStreamSynchronize",
        source_ + ": waiting for the kernels (a kernel failed; with "
                  "CUDA_LAUNCH_BLOCKING=1 its launch is named)");
}

namespace {

class EventClock final : public StepClock {
public:
  explicit EventClock(CudaBackend &backend) : backend_(backend) {}
  ~EventClock() override {
    for (CUevent event : events_)
      backend_.driver().api().cuEventDestroy(event);
  }
  void mark() override {
    backend_.enter();
    const CudaApi &api = backend_.driver().api();
    CUevent event = nullptr;
    backend_.check(api.cuEventCreate(&event, 0), "cuEventCreate");
    events_.push_back(event);
    backend_.check(api.cuEventRecord(event, backend_.stream()), "cuEventRecord");
  }
  std::vector<double> intervals() override {
    backend_.enter();
    const CudaApi &api = backend_.driver().api();
    std::vector<double> result;
    if (events_.empty())
      return result;
    backend_.check(api.cuEventSynchronize(events_.back()), "cuEventSynchronize",
                   "timing the kernels (a kernel failed)");
    for (size_t i = 1; i < events_.size(); ++i) {
      float ms = 0;
      backend_.check(api.cuEventElapsedTime(&ms, events_[i - 1], events_[i]), "cuEventElapsedTime");
      result.push_back(ms);
    }
    return result;
  }

private:
  CudaBackend &backend_;
  std::vector<CUevent> events_;
};

} // namespace

std::unique_ptr<StepClock> CudaBackend::clock() {
  const CudaApi &api = driver_->api();
  if (!api.cuEventCreate || !api.cuEventRecord || !api.cuEventSynchronize ||
      !api.cuEventElapsedTime || !api.cuEventDestroy)
    return Backend::clock();
  return std::make_unique<EventClock>(*this);
}

bool CudaBackend::canRecord() const { return !launchBlocking(); }

std::unique_ptr<Recording> CudaBackend::record(const std::function<void()> &steps) {
  enter();
  const CudaApi &api = driver_->api();
  const std::string context = source_ + ": recording the decode step";
  check(api.cuStreamBeginCapture(stream_, kCaptureModeThreadLocal), "cuStreamBeginCapture_v2",
        context);
  std::vector<CapturedLaunch> launches;
  std::vector<CollectiveMark> marks;
  capture_ = &launches;
  captureMarks_ = &marks;
  try {
    steps();
  } catch (...) {
    capture_ = nullptr;
    captureMarks_ = nullptr;
    CUgraph partial = nullptr;
    api.cuStreamEndCapture(stream_, &partial);
    if (partial)
      api.cuGraphDestroy(partial);
    throw;
  }
  capture_ = nullptr;
  captureMarks_ = nullptr;
  CUgraph graph = nullptr;
  check(api.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture", context);
  CUgraphExec exec = nullptr;
  const CUresult instantiated = api.cuGraphInstantiateWithFlags(&exec, graph, 0);
  if (instantiated != kSuccess) {
    api.cuGraphDestroy(graph);
    check(instantiated, "cuGraphInstantiateWithFlags", context);
  }
  return std::make_unique<CudaGraph>(*this, graph, exec, std::move(launches), std::move(marks));
}

} // namespace cuda

std::unique_ptr<Backend> createCudaBackend(const Artifact &artifact, int device,
                                           const std::string &driverLibrary) {
  return cuda::CudaBackend::create(artifact, device, driverLibrary);
}

} // namespace kiln
