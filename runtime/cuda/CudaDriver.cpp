#include "runtime/cuda/CudaDriver.h"

#include <dlfcn.h>

namespace kiln::cuda {
namespace {

struct NamedError {
  CUresult result;
  const char *name;
};

// The errors a user is likely to meet before the driver can name them.
constexpr NamedError kKnownErrors[] = {
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {300, "CUDA_ERROR_INVALID_SOURCE"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

// An entry point: `symbol`, or when the driver lacks it and `fallback` is
// given, that one; null when neither exists.
template <typename Fn>
bool resolve(void *handle, Fn &slot, const char *symbol, const char *fallback = nullptr) {
  void *address = ::dlsym(handle, symbol);
  if (!address && fallback)
    address = ::dlsym(handle, fallback);
  slot = reinterpret_cast<Fn>(address);
  return address != nullptr;
}

} // namespace

std::string knownCudaErrorName(CUresult result) {
  for (const NamedError &known : kKnownErrors)
    if (known.result == result)
      return known.name;
  return "CUDA error " + std::to_string(result);
}

std::shared_ptr<const CudaDriver> CudaDriver::system() {
  struct Loaded {
    std::shared_ptr<const CudaDriver> driver;
    std::string error;
  };
  static const Loaded loaded = [] {
    try {
      return Loaded{load(kLibrary), std::string()};
    } catch (const CudaUnavailable &error) {
      return Loaded{nullptr, error.what()};
    }
  }();
  if (!loaded.driver)
    throw CudaUnavailable(loaded.error);
  return loaded.driver;
}

std::shared_ptr<const CudaDriver> CudaDriver::load(const std::string &library) {
  void *handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw CudaUnavailable("no CUDA driver (" + library + ")");
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->library_ = library;
  CudaApi &api = driver->api_;
  std::string missing;
  auto need = [&](auto &slot, const char *symbol, const char *fallback = nullptr) {
    if (!resolve(handle, slot, symbol, fallback) && missing.empty())
      missing = symbol;
  };
  need(api.cuInit, "cuInit");
  need(api.cuDriverGetVersion, "cuDriverGetVersion");
  need(api.cuGetErrorName, "cuGetErrorName");
  need(api.cuGetErrorString, "cuGetErrorString");
  need(api.cuDeviceGetCount, "cuDeviceGetCount");
  need(api.cuDeviceGet, "cuDeviceGet");
  need(api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  need(api.cuDeviceGetName, "cuDeviceGetName");
  need(api.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  need(api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  need(api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  need(api.cuCtxSetCurrent, "cuCtxSetCurrent");
  need(api.cuCtxSynchronize, "cuCtxSynchronize");
  need(api.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  need(api.cuModuleGetFunction, "cuModuleGetFunction");
  need(api.cuModuleUnload, "cuModuleUnload");
  need(api.cuFuncGetAttribute, "cuFuncGetAttribute");
  need(api.cuFuncSetAttribute, "cuFuncSetAttribute");
  need(api.cuMemAlloc, "cuMemAlloc_v2");
  need(api.cuMemFree, "cuMemFree_v2");
  need(api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  need(api.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  need(api.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  need(api.cuMemsetD8, "cuMemsetD8_v2");
  need(api.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  need(api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  need(api.cuMemsetD8Async, "cuMemsetD8Async");
  need(api.cuLaunchKernel, "cuLaunchKernel");
  resolve(handle, api.cuLaunchKernelEx, "cuLaunchKernelEx");
  need(api.cuStreamCreate, "cuStreamCreate");
  need(api.cuStreamDestroy, "cuStreamDestroy_v2");
  need(api.cuStreamSynchronize, "cuStreamSynchronize");
  need(api.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  need(api.cuStreamEndCapture, "cuStreamEndCapture");
  if (!resolve(handle, api.cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo_v3"))
    need(api.cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo_v2");
  need(api.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  need(api.cuGraphLaunch, "cuGraphLaunch");
  need(api.cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",
       "cuGraphExecKernelNodeSetParams");
  need(api.cuGraphExecDestroy, "cuGraphExecDestroy");
  need(api.cuGraphDestroy, "cuGraphDestroy");
  resolve(handle, api.cuEventCreate, "cuEventCreate");
  resolve(handle, api.cuEventRecord, "cuEventRecord");
  resolve(handle, api.cuEventSynchronize, "cuEventSynchronize");
  resolve(handle, api.cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  resolve(handle, api.cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
  resolve(handle, api.cuStreamQuery, "cuStreamQuery");
  resolve(handle, api.cuEventQuery, "cuEventQuery");
  resolve(handle, api.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2");
  resolve(handle, api.cuIpcGetMemHandle, "cuIpcGetMemHandle");
  resolve(handle, api.cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle");
  resolve(handle, api.cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
  resolve(handle, api.cuOccupancyMaxActiveBlocksPerMultiprocessor,
          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  resolve(handle, api.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");

  // cuDriverGetVersion works before cuInit.
  if (api.cuDriverGetVersion)
    api.cuDriverGetVersion(&driver->version_);
  if (!missing.empty())
    throw CudaUnavailable(driver->name() + " lacks " + missing +
                          " (this runtime needs a driver for CUDA 11.4 or newer)");

  const CUresult init = api.cuInit(0);
  if (init == kErrorStubLibrary)
    throw CudaUnavailable("no CUDA driver (" + library +
                          " is the CUDA toolkit's stub library, not a "
                          "driver: cuInit returned CUDA_ERROR_STUB_LIBRARY)");
  if (init == kErrorNoDevice)
    throw CudaUnavailable("no CUDA device (cuInit: " + driver->describe(init) + ")");
  if (init != kSuccess)
    throw CudaUnavailable(driver->name() + " does not start (cuInit: " + driver->describe(init) +
                          ")");
  return driver;
}

std::string CudaDriver::name() const {
  const std::string version = version_ > 0 ? " " + std::to_string(version_ / 1000) + "." +
                                                 std::to_string(version_ % 1000 / 10)
                                           : std::string();
  return "the CUDA driver" + version + " (" + library_ + ")";
}

std::string CudaDriver::describe(CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  std::string description =
      api_.cuGetErrorName && api_.cuGetErrorName(result, &name) == kSuccess && name
          ? std::string(name)
          : knownCudaErrorName(result);
  if (api_.cuGetErrorString && api_.cuGetErrorString(result, &text) == kSuccess && text)
    description += std::string(": ") + text;
  return description;
}

void CudaDriver::check(CUresult result, std::string_view call, const std::string &context) const {
  if (result == kSuccess)
    return;
  throw RuntimeError((context.empty() ? std::string() : context + ": ") + std::string(call) + ": " +
                     describe(result));
}

} // namespace kiln::cuda
