#include "runtime/hip/HipBackend.h"

#include "runtime/hip/AmdgcnArtifact.h"
#include "runtime/hip/HipGraph.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace kiln {
namespace fb = kiln::artifact;

namespace hip {
namespace {

// HIP launches a grid of work-items, blocks times threads along x, counted in
// 32 bits.
constexpr uint64_t kMaxWorkItemsX = std::numeric_limits<uint32_t>::max();

std::string gibibytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

bool launchBlocking() {
  const char *value = std::getenv("HIP_LAUNCH_BLOCKING");
  return value && std::strcmp(value, "1") == 0;
}

void *pointer(DeviceAddress address) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(address));
}

// A fixed-size char array's text, up to its first NUL (or all of it).
std::string text(const char *chars, size_t size) {
  return std::string(chars, ::strnlen(chars, size));
}

// A runtime's log on one line: lines joined with "; ".
std::string oneLine(const std::string &log) {
  std::string line;
  for (const char c : log) {
    if (c == '\n' || c == '\r') {
      if (!line.empty() && line.back() != ' ')
        line += "; ";
    } else {
      line += c;
    }
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == ';'))
    line.pop_back();
  return line;
}

} // namespace

HipLaunch::HipLaunch(hipFunction_t kernel, unsigned threads, std::string step,
                     const LaunchSpec &spec)
    : function(kernel), block(threads), sharedBytes(spec.sharedBytes), where(std::move(step)),
      params(spec.ranks, spec.scalarKinds.size()) {}

void **HipLaunch::arguments(const LaunchCall &call) {
  params.pack(call.buffers, call.scalars);
  return params.pointers();
}

std::unique_ptr<HipBackend> HipBackend::create(const Artifact &artifact, int ordinal,
                                               const std::string &library) {
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

  std::unique_ptr<HipBackend> backend(new HipBackend(std::move(driver), artifact.source()));
  backend->openDevice(ordinal);
  const DeviceInfo &device = backend->device_;
  checkTarget(artifact, fb::TargetKind::AMDGCN, [&](const fb::Target &t) {
    const std::string reason = amdgcnChipSupport(t, device.gcnArchName);
    if (reason.empty())
      return reason;
    return "device " + std::to_string(device.ordinal) + " (" + device.name + ") is " +
           device.gcnArchName + "; " + reason;
  });
  backend->check(
      backend->driver_->api().hipStreamCreateWithFlags(&backend->stream_, kStreamNonBlocking),
      "hipStreamCreateWithFlags", "AMD GPU " + std::to_string(ordinal));
  return backend;
}

void HipBackend::openDevice(int ordinal) {
  const HipApi &api = driver_->api();
  const std::string context = "AMD GPU " + std::to_string(ordinal);
  device_.ordinal = ordinal;
  check(api.hipSetDevice(ordinal), "hipSetDevice", context);
  DeviceProperties properties;
  check(driver_->properties(ordinal, properties), "hipGetDeviceProperties", context);
  device_.name = text(properties.name, sizeof properties.name);
  if (device_.name.empty())
    device_.name = "AMD GPU";
  device_.gcnArchName = text(properties.gcnArchName, sizeof properties.gcnArchName);
  // A runtime whose hipDeviceProp_t is not HIP 5's would leave something
  // else here; refuse rather than compare the chip against it.
  if (device_.gcnArchName.rfind("gfx", 0) != 0 ||
      device_.gcnArchName.size() == sizeof properties.gcnArchName)
    throw RuntimeError(source_ + ": " + context +
                       ": hipGetDeviceProperties gave no gfx architecture name (this "
                       "runtime reads HIP 5's hipDeviceProp_t, which the HIP runtime " +
                       driver_->versionText() + " (" + driver_->library() +
                       ") does not seem to keep)");
  device_.memoryBytes = properties.totalGlobalMem;
  device_.computeUnits = properties.multiProcessorCount;
  auto attribute = [&](int which, const char *what) {
    int value = 0;
    check(api.hipDeviceGetAttribute(&value, which, ordinal), "hipDeviceGetAttribute",
          context + ": " + what);
    return value;
  };
  device_.sharedBytesPerBlock = properties.sharedMemPerBlock;
  device_.maxThreadsPerBlock = attribute(kAttrMaxThreadsPerBlock, "max threads per block");
  device_.maxGridX = attribute(kAttrMaxGridDimX, "max grid size");
  device_.warpSize = attribute(kAttrWarpSize, "wavefront size");
}

HipBackend::~HipBackend() {
  // Errors are ignored: after an error nothing may be freeable anyway.
  const HipApi &api = driver_->api();
  api.hipSetDevice(device_.ordinal);
  if (stream_) {
    api.hipStreamSynchronize(stream_);
    api.hipStreamDestroy(stream_);
  }
  if (module_)
    api.hipModuleUnload(module_);
}

std::string HipBackend::description() const {
  return device_.name + " (" + device_.gcnArchName + ", " + std::to_string(device_.computeUnits) +
         " compute units, " + gibibytes(device_.memoryBytes) + ", device " +
         std::to_string(device_.ordinal) + ")";
}

void HipBackend::enter() {
  if (!stopped_.empty())
    throw RuntimeError("an earlier HIP error stopped this engine: " + stopped_);
  check(driver_->api().hipSetDevice(device_.ordinal), "hipSetDevice");
}

void HipBackend::check(hipError_t result, std::string_view call, const std::string &context) {
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

DeviceAddress HipBackend::allocate(uint64_t bytes, const std::string &what) {
  if (bytes == 0)
    return 0;
  enter();
  void *address = nullptr;
  check(driver_->api().hipMalloc(&address, static_cast<size_t>(bytes)), "hipMalloc",
        source_ + ": " + what + " (" + std::to_string(bytes) + " bytes on " + device_.name +
            ", device " + std::to_string(device_.ordinal) + ")");
  const auto result = static_cast<DeviceAddress>(reinterpret_cast<uintptr_t>(address));
  fill(result, 0, bytes);
  return result;
}

void HipBackend::release(DeviceAddress address) noexcept {
  if (!address)
    return;
  const HipApi &api = driver_->api();
  api.hipSetDevice(device_.ordinal);
  api.hipFree(pointer(address));
}

void HipBackend::upload(DeviceAddress to, const void *from, uint64_t bytes) {
  if (bytes == 0)
    return;
  if (capture_)
    throw std::logic_error("an upload cannot be recorded");
  enter();
  const HipApi &api = driver_->api();
  check(api.hipMemcpyAsync(pointer(to), from, static_cast<size_t>(bytes), kMemcpyHostToDevice,
                           stream_),
        "hipMemcpyAsync (host to device)", source_);
  check(api.hipStreamSynchronize(stream_), "hipStreamSynchronize",
        source_ + ": uploading " + std::to_string(bytes) + " bytes");
}

void HipBackend::download(void *to, DeviceAddress from, uint64_t bytes) {
  synchronize();
  if (bytes == 0)
    return;
  const HipApi &api = driver_->api();
  check(api.hipMemcpyAsync(to, pointer(from), static_cast<size_t>(bytes), kMemcpyDeviceToHost,
                           stream_),
        "hipMemcpyAsync (device to host)", source_);
  check(api.hipStreamSynchronize(stream_), "hipStreamSynchronize",
        source_ + ": downloading " + std::to_string(bytes) + " bytes");
}

void HipBackend::fill(DeviceAddress to, uint8_t value, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(driver_->api().hipMemsetAsync(pointer(to), value, static_cast<size_t>(bytes), stream_),
        "hipMemsetAsync", source_);
}

void HipBackend::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(driver_->api().hipMemcpyAsync(pointer(to), pointer(from), static_cast<size_t>(bytes),
                                      kMemcpyDeviceToDevice, stream_),
        "hipMemcpyAsync (device to device)", source_);
}

void HipBackend::loadKernels(const Artifact &artifact) {
  if (artifact.numKernels() == 0)
    return;
  enter();
  const HipApi &api = driver_->api();
  // The code object, an ELF image (the artifact checks its header).
  const auto *blob = artifact->library()->blob();
  const hipError_t loaded = api.hipModuleLoadData(&module_, blob->data());
  if (loaded != kSuccess) {
    module_ = nullptr;
    check(loaded, "hipModuleLoadData",
          source_ + ": loading the code object for " + describeTarget(*artifact->target()) +
              " on " + device_.name + " (" + device_.gcnArchName + ")");
  }
  for (const fb::Kernel *kernel : *artifact->kernels()) {
    hipFunction_t function = nullptr;
    const std::string name = kernel->name()->str();
    check(api.hipModuleGetFunction(&function, module_, name.c_str()), "hipModuleGetFunction",
          source_ + ": kernel '" + name + "' (not in the code object?)");
    functions_.push_back(function);
  }
}

std::unique_ptr<PreparedLaunch> HipBackend::prepare(const LaunchSpec &spec) {
  enter();
  const std::string where = source_ + ": " + spec.where;
  for (fb::ScalarKind kind : spec.scalarKinds)
    if (kind == fb::ScalarKind::Part || kind == fb::ScalarKind::Parts)
      throw RuntimeError(where + ": GPU launches take no Part or Parts scalar");
  if (!spec.tensorMaps.empty() || std::find(spec.scalarKinds.begin(), spec.scalarKinds.end(),
                                            fb::ScalarKind::TensorMap) != spec.scalarKinds.end())
    throw RuntimeError(where + ": TensorMap scalars are CUDA tensor maps, for nvptx artifacts; "
                               "AMD GPUs have none");
  const hipFunction_t function = functions_.at(spec.kernel);
  const std::string onDevice = device_.name + ", device " + std::to_string(device_.ordinal);
  if (spec.block < 1 || spec.block > static_cast<uint32_t>(device_.maxThreadsPerBlock))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) + " threads; " +
                       onDevice + " allows 1.." + std::to_string(device_.maxThreadsPerBlock));
  int kernelMax = 0;
  check(driver_->api().hipFuncGetAttribute(&kernelMax, kFuncAttrMaxThreadsPerBlock, function),
        "hipFuncGetAttribute", where);
  if (spec.block > static_cast<uint32_t>(kernelMax))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) +
                       " threads, but the compiled kernel takes at most " +
                       std::to_string(kernelMax) + " on " + onDevice +
                       " (its amdgpu-flat-work-group-size)");
  if (spec.maxGrid > device_.maxGridX)
    throw RuntimeError(where + ": a grid of " + std::to_string(spec.maxGrid) +
                       " blocks at max_tokens; " + onDevice + " allows at most " +
                       std::to_string(device_.maxGridX));
  if (spec.sharedBytes > device_.sharedBytesPerBlock)
    throw RuntimeError(where + ": " + std::to_string(spec.sharedBytes) +
                       " bytes of dynamic shared memory (LDS); " + onDevice +
                       " gives a block at most " + std::to_string(device_.sharedBytesPerBlock));
  if (static_cast<uint64_t>(spec.maxGrid) * spec.block > kMaxWorkItemsX)
    throw RuntimeError(where + ": a grid of " + std::to_string(spec.maxGrid) + " blocks of " +
                       std::to_string(spec.block) +
                       " threads at max_tokens; HIP launches at most " +
                       std::to_string(kMaxWorkItemsX) + " threads along x");
  return std::make_unique<HipLaunch>(function, spec.block, spec.where, spec);
}

void HipBackend::launch(PreparedLaunch &prepared, const LaunchCall &call) {
  auto &launch = static_cast<HipLaunch &>(prepared);
  enter();
  void **arguments = launch.arguments(call);
  const auto grid = static_cast<unsigned>(call.grid);
  check(driver_->api().hipModuleLaunchKernel(launch.function, grid, 1, 1, launch.block, 1, 1,
                                             launch.sharedBytes, stream_, arguments, nullptr),
        "hipModuleLaunchKernel", source_ + ": " + launch.where);
  if (capture_)
    capture_->push_back(CapturedLaunch{&prepared, capturedNode(), launch.function, grid,
                                       launch.block, launch.sharedBytes, launch.where,
                                       launch.params});
}

hipGraphNode_t HipBackend::capturedNode() {
  int status = 0;
  unsigned long long id = 0;
  hipGraph_t graph = nullptr;
  const hipGraphNode_t *dependencies = nullptr;
  size_t count = 0;
  check(driver_->api().hipStreamGetCaptureInfo_v2(stream_, &status, &id, &graph, &dependencies,
                                                  &count),
        "hipStreamGetCaptureInfo_v2", source_);
  // In a stream's capture the last operation is the one node that the next
  // depends on.
  if (status != kCaptureStatusActive || count != 1 || !dependencies)
    throw RuntimeError(source_ + ": recording the decode step: the stream "
                                 "capture lost track of a launch");
  return dependencies[0];
}

void HipBackend::synchronize() {
  enter();
  check(driver_->api().hipStreamSynchronize(stream_), "hipStreamSynchronize",
        source_ + ": waiting for the kernels (a kernel failed)");
}

bool HipBackend::canRecord() const { return !launchBlocking(); }

std::unique_ptr<Recording> HipBackend::record(const std::function<void()> &steps) {
  enter();
  const HipApi &api = driver_->api();
  const std::string context = source_ + ": recording the decode step";
  check(api.hipStreamBeginCapture(stream_, kCaptureModeThreadLocal), "hipStreamBeginCapture",
        context);
  std::vector<CapturedLaunch> launches;
  capture_ = &launches;
  try {
    steps();
  } catch (...) {
    capture_ = nullptr;
    hipGraph_t partial = nullptr;
    api.hipStreamEndCapture(stream_, &partial);
    if (partial)
      api.hipGraphDestroy(partial);
    throw;
  }
  capture_ = nullptr;
  hipGraph_t graph = nullptr;
  check(api.hipStreamEndCapture(stream_, &graph), "hipStreamEndCapture", context);
  hipGraphExec_t exec = nullptr;
  hipGraphNode_t failed = nullptr;
  char log[1024] = {};
  const hipError_t instantiated =
      api.hipGraphInstantiate(&exec, graph, &failed, log, sizeof log - 1);
  if (instantiated != kSuccess) {
    api.hipGraphDestroy(graph);
    const std::string detail = oneLine(text(log, sizeof log));
    check(instantiated, "hipGraphInstantiate",
          context + (detail.empty() ? std::string() : " (" + detail + ")"));
  }
  return std::make_unique<HipGraph>(*this, graph, exec, std::move(launches));
}

} // namespace hip

std::unique_ptr<Backend> createHipBackend(const Artifact &artifact, int device,
                                          const std::string &library) {
  return hip::HipBackend::create(artifact, device, library);
}

} // namespace kiln
