#include "runtime/hip/HipDriver.h"

#include <cstring>
#include <dlfcn.h>
#include <initializer_list>
#include <vector>

namespace kiln::hip {
namespace {

struct NamedError {
  hipError_t result;
  const char *name;
};

// The errors a user is likely to meet before the runtime can name them.
constexpr NamedError kKnownErrors[] = {
    {1, "hipErrorInvalidValue"},
    {2, "hipErrorOutOfMemory"},
    {3, "hipErrorNotInitialized"},
    {4, "hipErrorDeinitialized"},
    {35, "hipErrorInsufficientDriver"},
    {98, "hipErrorInvalidDeviceFunction"},
    {100, "hipErrorNoDevice"},
    {101, "hipErrorInvalidDevice"},
    {200, "hipErrorInvalidImage"},
    {201, "hipErrorInvalidContext"},
    {209, "hipErrorNoBinaryForGpu"},
    {218, "hipErrorInvalidKernelFile"},
    {303, "hipErrorSharedObjectInitFailed"},
    {400, "hipErrorInvalidHandle"},
    {500, "hipErrorNotFound"},
    {700, "hipErrorIllegalAddress"},
    {701, "hipErrorLaunchOutOfResources"},
    {702, "hipErrorLaunchTimeOut"},
    {719, "hipErrorLaunchFailure"},
    {801, "hipErrorNotSupported"},
    {900, "hipErrorStreamCaptureUnsupported"},
    {901, "hipErrorStreamCaptureInvalidated"},
    {999, "hipErrorUnknown"},
};

template <typename Fn> bool resolve(void *handle, Fn &slot, const char *symbol) {
  void *address = ::dlsym(handle, symbol);
  slot = reinterpret_cast<Fn>(address);
  return address != nullptr;
}

bool isNoDevice(hipError_t result) {
  return result == kErrorNoDevice || result == kErrorInvalidDevice;
}

} // namespace

std::string knownHipErrorName(hipError_t result) {
  for (const NamedError &known : kKnownErrors)
    if (known.result == result)
      return known.name;
  return "HIP error " + std::to_string(result);
}

std::string_view archOf(std::string_view gcnArchName) {
  return gcnArchName.substr(0, gcnArchName.find(':'));
}

std::shared_ptr<const HipDriver> HipDriver::system() {
  struct Loaded {
    std::shared_ptr<const HipDriver> driver;
    std::string error;
  };
  static const Loaded loaded = [] {
    try {
      // The development symlink, else the HIP 5 runtime's soname.
      for (const char *library : {kLibrary, kLibraryMajor5})
        // Kept open, as load() keeps what it opens.
        if (::dlopen(library, RTLD_NOW | RTLD_LOCAL))
          return Loaded{load(library), std::string()};
      return Loaded{nullptr, "no HIP runtime (" + std::string(kLibrary) + ")"};
    } catch (const HipUnavailable &error) {
      return Loaded{nullptr, error.what()};
    }
  }();
  if (!loaded.driver)
    throw HipUnavailable(loaded.error);
  return loaded.driver;
}

std::shared_ptr<const HipDriver> HipDriver::load(const std::string &library) {
  void *handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw HipUnavailable("no HIP runtime (" + library + ")");
  std::shared_ptr<HipDriver> driver(new HipDriver());
  driver->library_ = library;
  HipApi &api = driver->api_;
  std::string missing;
  auto need = [&](auto &slot, const char *symbol) {
    if (!resolve(handle, slot, symbol) && missing.empty())
      missing = symbol;
  };
  need(api.hipInit, "hipInit");
  need(api.hipRuntimeGetVersion, "hipRuntimeGetVersion");
  need(api.hipGetErrorName, "hipGetErrorName");
  need(api.hipGetErrorString, "hipGetErrorString");
  need(api.hipGetDeviceCount, "hipGetDeviceCount");
  need(api.hipSetDevice, "hipSetDevice");
  need(api.hipGetDeviceProperties, "hipGetDeviceProperties");
  need(api.hipDeviceGetAttribute, "hipDeviceGetAttribute");
  need(api.hipModuleLoadData, "hipModuleLoadData");
  need(api.hipModuleGetFunction, "hipModuleGetFunction");
  need(api.hipModuleUnload, "hipModuleUnload");
  need(api.hipFuncGetAttribute, "hipFuncGetAttribute");
  need(api.hipMalloc, "hipMalloc");
  need(api.hipFree, "hipFree");
  need(api.hipMemcpyAsync, "hipMemcpyAsync");
  need(api.hipMemsetAsync, "hipMemsetAsync");
  need(api.hipModuleLaunchKernel, "hipModuleLaunchKernel");
  need(api.hipStreamCreateWithFlags, "hipStreamCreateWithFlags");
  need(api.hipStreamDestroy, "hipStreamDestroy");
  need(api.hipStreamSynchronize, "hipStreamSynchronize");
  need(api.hipStreamBeginCapture, "hipStreamBeginCapture");
  need(api.hipStreamEndCapture, "hipStreamEndCapture");
  need(api.hipStreamGetCaptureInfo_v2, "hipStreamGetCaptureInfo_v2");
  need(api.hipGraphInstantiate, "hipGraphInstantiate");
  need(api.hipGraphLaunch, "hipGraphLaunch");
  need(api.hipGraphExecKernelNodeSetParams, "hipGraphExecKernelNodeSetParams");
  need(api.hipGraphExecDestroy, "hipGraphExecDestroy");
  need(api.hipGraphDestroy, "hipGraphDestroy");
  if (!missing.empty())
    throw HipUnavailable("the HIP runtime (" + library + ") lacks " + missing +
                         " (this runtime needs HIP 5.2 or newer)");

  const hipError_t init = api.hipInit(0);
  if (isNoDevice(init))
    throw HipUnavailable("no AMD GPU (" + library + ": hipInit: " + driver->describe(init) + ")");
  if (init != kSuccess)
    throw HipUnavailable("the HIP runtime (" + library +
                         ") does not start (hipInit: " + driver->describe(init) + ")");
  if (api.hipRuntimeGetVersion(&driver->version_) != kSuccess)
    driver->version_ = 0;
  const std::string version = driver->versionText();
  const std::string named =
      "the HIP runtime" + (version.empty() ? "" : " " + version) + " (" + library + ")";
  int count = 0;
  const hipError_t counted = api.hipGetDeviceCount(&count);
  if (isNoDevice(counted) || (counted == kSuccess && count < 1))
    throw HipUnavailable("no AMD GPU (" + library + ": hipGetDeviceCount found none)");
  if (counted != kSuccess)
    throw HipUnavailable(named +
                         " does not start (hipGetDeviceCount: " + driver->describe(counted) + ")");
  driver->deviceCount_ = count;
  return driver;
}

std::string HipDriver::versionText() const {
  if (version_ <= 0)
    return std::string();
  return std::to_string(version_ / 10000000) + "." + std::to_string(version_ / 100000 % 100);
}

std::string HipDriver::describe(hipError_t result) const {
  const char *name = api_.hipGetErrorName ? api_.hipGetErrorName(result) : nullptr;
  std::string description = name && *name ? std::string(name) : knownHipErrorName(result);
  const char *text = api_.hipGetErrorString ? api_.hipGetErrorString(result) : nullptr;
  if (text && *text && description != text)
    description += std::string(": ") + text;
  return description;
}

void HipDriver::check(hipError_t result, std::string_view call, const std::string &context) const {
  if (result == kSuccess)
    return;
  throw RuntimeError((context.empty() ? std::string() : context + ": ") + std::string(call) + ": " +
                     describe(result));
}

hipError_t HipDriver::properties(int ordinal, DeviceProperties &properties) const {
  std::vector<unsigned char> buffer(kDevicePropertiesBytes, 0);
  const hipError_t result = api_.hipGetDeviceProperties(buffer.data(), ordinal);
  if (result == kSuccess)
    std::memcpy(&properties, buffer.data(), sizeof properties);
  return result;
}

} // namespace kiln::hip
