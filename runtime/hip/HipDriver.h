// The HIP runtime API, loaded at run time: libamdhip64.so (or, without the
// development symlink, libamdhip64.so.5) is dlopen'ed once per process and the
// few entry points the runtime uses are resolved by name, so the runtime
// builds and runs its CPU and CUDA paths without ROCm anywhere. The types
// below are HIP's (hip/hip_runtime_api.h, HIP 5), declared here by layout;
// test/unit/runtime_hip/HipLayoutTest.cpp checks them against the header
// where it is installed.
//
// Every failing call becomes a RuntimeError naming what it was doing, the
// call and the HIP error's name and text ("weight 'lm_head.weight':
// hipMalloc: hipErrorOutOfMemory: out of memory"). A machine without a usable
// runtime or device gets a HipUnavailable with a one-line reason.
#pragma once

#include "runtime/cpu/RuntimeError.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::hip {

using hipError_t = int;
struct ihipModule_t;
using hipModule_t = ihipModule_t *;
struct ihipModuleSymbol_t;
using hipFunction_t = ihipModuleSymbol_t *;
struct ihipStream_t;
using hipStream_t = ihipStream_t *;
struct ihipGraph;
using hipGraph_t = ihipGraph *;
struct hipGraphExec;
using hipGraphExec_t = hipGraphExec *;
struct hipGraphNode;
using hipGraphNode_t = hipGraphNode *;

// hipError_t values the runtime tells apart.
constexpr hipError_t kSuccess = 0;              // hipSuccess
constexpr hipError_t kErrorNoDevice = 100;      // hipErrorNoDevice
constexpr hipError_t kErrorInvalidDevice = 101; // hipErrorInvalidDevice

// hipDeviceAttribute_t.
constexpr int kAttrMaxGridDimX = 29;
constexpr int kAttrMaxThreadsPerBlock = 56;
constexpr int kAttrWarpSize = 87;
// hipFunction_attribute.
constexpr int kFuncAttrMaxThreadsPerBlock = 0;
// hipMemcpyKind.
constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;
constexpr int kMemcpyDeviceToDevice = 3;
// hipStreamCreateWithFlags flags.
constexpr unsigned kStreamNonBlocking = 1;
// hipStreamCaptureMode and hipStreamCaptureStatus.
constexpr int kCaptureModeThreadLocal = 1;
constexpr int kCaptureStatusActive = 1;

// The leading fields of hipDeviceProp_t in HIP 5's layout (the one the plain
// hipGetDeviceProperties symbol keeps in later runtimes), up to gcnArchName.
// The runtime fills a larger buffer (kDevicePropertiesBytes) and reads these
// from its start.
struct DeviceProperties {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  int memoryClockRate;
  int memoryBusWidth;
  size_t totalConstMem;
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int maxThreadsPerMultiProcessor;
  int computeMode;
  int clockInstructionRate;
  uint32_t arch; // hipDeviceArch_t: 17 one-bit fields
  int concurrentKernels;
  int pciDomainID;
  int pciBusID;
  int pciDeviceID;
  size_t maxSharedMemoryPerMultiProcessor;
  int isMultiGpuBoard;
  int canMapHostMemory;
  int gcnArch;
  char gcnArchName[256]; // "gfx942:sramecc+:xnack-"
};
// Room given to hipGetDeviceProperties: far more than any layout so far
// (792 bytes in HIP 5.2), so that a runtime with a longer struct cannot write
// past it.
constexpr size_t kDevicePropertiesBytes = 8192;

// dim3.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// hipKernelNodeParams.
struct KernelNodeParams {
  Dim3 blockDim;
  void **extra = nullptr;
  void *func = nullptr; // the hipFunction_t of a module kernel
  Dim3 gridDim;
  void **kernelParams = nullptr;
  unsigned sharedMemBytes = 0;
};

// The entry points, under their HIP names.
struct HipApi {
  hipError_t (*hipInit)(unsigned flags);
  hipError_t (*hipRuntimeGetVersion)(int *version);
  const char *(*hipGetErrorName)(hipError_t error);
  const char *(*hipGetErrorString)(hipError_t error);
  hipError_t (*hipGetDeviceCount)(int *count);
  hipError_t (*hipSetDevice)(int ordinal);
  // Fills kDevicePropertiesBytes at most; DeviceProperties is its start.
  hipError_t (*hipGetDeviceProperties)(void *properties, int ordinal);
  hipError_t (*hipDeviceGetAttribute)(int *value, int attribute, int ordinal);
  hipError_t (*hipModuleLoadData)(hipModule_t *module, const void *image);
  hipError_t (*hipModuleGetFunction)(hipFunction_t *function, hipModule_t module, const char *name);
  hipError_t (*hipModuleUnload)(hipModule_t module);
  hipError_t (*hipFuncGetAttribute)(int *value, int attribute, hipFunction_t function);
  hipError_t (*hipMalloc)(void **address, size_t bytes);
  hipError_t (*hipFree)(void *address);
  hipError_t (*hipMemcpyAsync)(void *to, const void *from, size_t bytes, int kind,
                               hipStream_t stream);
  hipError_t (*hipMemsetAsync)(void *to, int value, size_t bytes, hipStream_t stream);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t function, unsigned gridX, unsigned gridY,
                                      unsigned gridZ, unsigned blockX, unsigned blockY,
                                      unsigned blockZ, unsigned sharedMemBytes, hipStream_t stream,
                                      void **kernelParams, void **extra);
  hipError_t (*hipStreamCreateWithFlags)(hipStream_t *stream, unsigned flags);
  hipError_t (*hipStreamDestroy)(hipStream_t stream);
  hipError_t (*hipStreamSynchronize)(hipStream_t stream);
  hipError_t (*hipStreamBeginCapture)(hipStream_t stream, int mode);
  hipError_t (*hipStreamEndCapture)(hipStream_t stream, hipGraph_t *graph);
  hipError_t (*hipStreamGetCaptureInfo_v2)(hipStream_t stream, int *status, unsigned long long *id,
                                           hipGraph_t *graph, const hipGraphNode_t **dependencies,
                                           size_t *numDependencies);
  hipError_t (*hipGraphInstantiate)(hipGraphExec_t *exec, hipGraph_t graph,
                                    hipGraphNode_t *errorNode, char *log, size_t logBytes);
  hipError_t (*hipGraphLaunch)(hipGraphExec_t exec, hipStream_t stream);
  hipError_t (*hipGraphExecKernelNodeSetParams)(hipGraphExec_t exec, hipGraphNode_t node,
                                                const KernelNodeParams *params);
  hipError_t (*hipGraphExecDestroy)(hipGraphExec_t exec);
  hipError_t (*hipGraphDestroy)(hipGraph_t graph);
};

// No usable runtime or device: a one-line reason ("no HIP runtime
// (libamdhip64.so)", "no AMD GPU (libamdhip64.so: hipInit:
// hipErrorInvalidDevice)").
class HipUnavailable : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

// The name of a hipError_t ("hipErrorNoDevice") as this runtime knows it
// without a HIP runtime, or "HIP error N".
std::string knownHipErrorName(hipError_t result);

class HipDriver {
public:
  // The names the process's runtime is looked for under, in order.
  static constexpr const char *kLibrary = "libamdhip64.so";
  static constexpr const char *kLibraryMajor5 = "libamdhip64.so.5";

  // The runtime of this process: kLibrary (else kLibraryMajor5), loaded and
  // initialised on the first call; later calls return it, or throw the same
  // HipUnavailable.
  static std::shared_ptr<const HipDriver> system();
  // The runtime at `library` (a name for dlopen or a path): loaded, every
  // entry point resolved, hipInit called and at least one device found.
  // Throws HipUnavailable saying why not: no such library, one that lacks an
  // entry point, no device. The library is never unloaded.
  static std::shared_ptr<const HipDriver> load(const std::string &library);

  const HipApi &api() const { return api_; }
  // hipRuntimeGetVersion: major * 10000000 + minor * 100000 + patch.
  int version() const { return version_; }
  // "5.2", or "" when the runtime did not say.
  std::string versionText() const;
  const std::string &library() const { return library_; }
  // Devices hipGetDeviceCount reported when loaded (at least 1).
  int deviceCount() const { return deviceCount_; }

  // "hipErrorOutOfMemory: out of memory" (the text left out where the
  // runtime's text is only the name again).
  std::string describe(hipError_t result) const;
  // Throws RuntimeError "<context>: <call>: <describe(result)>" (without
  // "<context>: " when it is empty) unless `result` is success.
  void check(hipError_t result, std::string_view call,
             const std::string &context = std::string()) const;

  // hipGetDeviceProperties into a buffer of kDevicePropertiesBytes; returns
  // the call's result, and on success the leading fields in `properties`.
  hipError_t properties(int ordinal, DeviceProperties &properties) const;

private:
  HipDriver() = default;

  HipApi api_{};
  int version_ = 0;
  int deviceCount_ = 0;
  std::string library_;
};

// The architecture of a gcnArchName: "gfx942" of "gfx942:sramecc+:xnack-".
std::string_view archOf(std::string_view gcnArchName);

} // namespace kiln::hip
