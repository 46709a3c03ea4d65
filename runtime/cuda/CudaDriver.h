// The CUDA driver API, loaded at run time: libcuda.so.1 is dlopen'ed (once
// per process) and the few entry points the runtime uses are resolved by
// name, so the runtime builds and runs its CPU paths without CUDA anywhere.
// The types below are the driver's (cuda.h), declared here by layout.
//
// Every failing call becomes a RuntimeError naming what it was doing, the
// call and the CUDA error's name and text ("weight 'lm_head.weight':
// cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory"). A machine without a usable driver or
// device gets a CudaUnavailable with a one-line reason.
#pragma once

#include "runtime/cpu/RuntimeError.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
using CUcontext = CUctx_st *;
struct CUmod_st;
using CUmodule = CUmod_st *;
struct CUfunc_st;
using CUfunction = CUfunc_st *;
struct CUstream_st;
using CUstream = CUstream_st *;
struct CUgraph_st;
using CUgraph = CUgraph_st *;
struct CUgraphExec_st;
using CUgraphExec = CUgraphExec_st *;
struct CUgraphNode_st;
using CUgraphNode = CUgraphNode_st *;
struct CUevent_st;
using CUevent = CUevent_st *;

// CUresult values the runtime tells apart.
constexpr CUresult kSuccess = 0;           // CUDA_SUCCESS
constexpr CUresult kErrorNotReady = 600;   // CUDA_ERROR_NOT_READY
constexpr CUresult kErrorStubLibrary = 34; // CUDA_ERROR_STUB_LIBRARY
constexpr CUresult kErrorNoDevice = 100;   // CUDA_ERROR_NO_DEVICE

// CUdevice_attribute.
constexpr int kAttrMaxThreadsPerBlock = 1;
constexpr int kAttrMaxGridDimX = 5;
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
// CUfunction_attribute.
constexpr int kFuncAttrMaxThreadsPerBlock = 0;
constexpr int kFuncAttrSharedSizeBytes = 1; // static shared memory
constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
// Dynamic shared memory a kernel gets without asking (above it, with
// kFuncAttrMaxDynamicSharedSizeBytes up to the device's opt-in limit).
constexpr unsigned kDefaultSharedBytes = 48 * 1024;
// CUtensorMap: opaque to all but the driver and the kernels, 128 bytes,
// 64-byte aligned (cuda.h of CUDA 13 aligns it to 128, which satisfies both).
struct alignas(128) TensorMap {
  uint64_t opaque[16];
};
// CUtensorMapDataType: the element types of Kiln's tensor maps.
constexpr int kTensorMapFloat16 = 6;
constexpr int kTensorMapFloat32 = 7;
constexpr int kTensorMapBfloat16 = 9;
// CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
// CUtensorMapFloatOOBfill.
constexpr int kTensorMapInterleaveNone = 0;
constexpr int kTensorMapSwizzleNone = 0;
constexpr int kTensorMapSwizzle32B = 1;
constexpr int kTensorMapSwizzle64B = 2;
constexpr int kTensorMapSwizzle128B = 3;
constexpr int kTensorMapL2Promotion128B = 2;
constexpr int kTensorMapOobFillNone = 0; // out-of-bounds elements read as zeros
// cuIpcOpenMemHandle flags: CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
constexpr unsigned kIpcLazyEnablePeerAccess = 1;
// CUipcMemHandle.
struct IpcMemHandle {
  char reserved[64];
};
// CUjit_option.
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;
// cuEventCreate flags.
constexpr unsigned kEventDisableTiming = 2;
// CUmemorytype.
constexpr int kMemoryTypeDevice = 2;
// CUDA_MEMCPY2D (v2).
struct Memcpy2D {
  size_t srcXInBytes = 0, srcY = 0;
  int srcMemoryType = 0;
  const void *srcHost = nullptr;
  CUdeviceptr srcDevice = 0;
  void *srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0, dstY = 0;
  int dstMemoryType = 0;
  void *dstHost = nullptr;
  CUdeviceptr dstDevice = 0;
  void *dstArray = nullptr;
  size_t dstPitch = 0;
  size_t widthInBytes = 0, height = 0;
};
// cuStreamCreate flags.
constexpr unsigned kStreamNonBlocking = 1;
// CUstreamCaptureMode and CUstreamCaptureStatus.
constexpr int kCaptureModeThreadLocal = 1;
constexpr int kCaptureStatusActive = 1;

// CUlaunchAttribute with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
// (its value a 64-byte union, the field first), and CUlaunchConfig.
constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;
struct LaunchAttribute {
  int id = 0;
  char pad[8 - sizeof(int)] = {};
  union Value {
    char pad[64];
    int programmaticStreamSerializationAllowed;
  } value = {};
};
struct LaunchConfig {
  unsigned gridDimX = 1, gridDimY = 1, gridDimZ = 1;
  unsigned blockDimX = 1, blockDimY = 1, blockDimZ = 1;
  unsigned sharedMemBytes = 0;
  CUstream hStream = nullptr;
  LaunchAttribute *attrs = nullptr;
  unsigned numAttrs = 0;
};

// CUDA_KERNEL_NODE_PARAMS (v2; v1 is its first ten fields).
struct KernelNodeParams {
  CUfunction func = nullptr;
  unsigned gridDimX = 1, gridDimY = 1, gridDimZ = 1;
  unsigned blockDimX = 1, blockDimY = 1, blockDimZ = 1;
  unsigned sharedMemBytes = 0;
  void **kernelParams = nullptr;
  void **extra = nullptr;
  void *kern = nullptr;    // CUkernel, unused when func is set
  CUcontext ctx = nullptr; // unused when func is set
};

// The entry points, under their cuda.h names; the comment gives the symbol
// when it differs.
struct CudaApi {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int *version);
  CUresult (*cuGetErrorName)(CUresult error, const char **name);
  CUresult (*cuGetErrorString)(CUresult error, const char **text);
  CUresult (*cuDeviceGetCount)(int *count);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device);
  CUresult (*cuDeviceGetName)(char *name, int length, CUdevice device);
  CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice device); // _v2
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *context, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device); // _v2
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned numOptions,
                                 int *options, void **optionValues);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuFuncGetAttribute)(int *value, int attribute, CUfunction function);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuMemAlloc)(CUdeviceptr *address, size_t bytes); // _v2
  CUresult (*cuMemFree)(CUdeviceptr address);                 // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr to, const void *from,
                           size_t bytes);                             // _v2
  CUresult (*cuMemcpyDtoH)(void *to, CUdeviceptr from, size_t bytes); // _v2
  CUresult (*cuMemcpyDtoD)(CUdeviceptr to, CUdeviceptr from,
                           size_t bytes); // _v2
  CUresult (*cuMemsetD8)(CUdeviceptr to, unsigned char value,
                         size_t count); // _v2
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr to, const void *from, size_t bytes,
                                CUstream stream); // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr to, CUdeviceptr from, size_t bytes,
                                CUstream stream); // _v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr to, unsigned char value, size_t count, CUstream stream);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned gridX, unsigned gridY, unsigned gridZ,
                             unsigned blockX, unsigned blockY, unsigned blockZ,
                             unsigned sharedMemBytes, CUstream stream, void **kernelParams,
                             void **extra);
  // Null where the driver lacks it (before CUDA 11.8): no programmatic launches.
  CUresult (*cuLaunchKernelEx)(const LaunchConfig *config, CUfunction function, void **kernelParams,
                               void **extra);
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream); // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode); // _v2
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph *graph);
  // _v3 (CUDA 12.3 on) or _v2: one of them is set.
  CUresult (*cuStreamGetCaptureInfo_v3)(CUstream stream, int *status, unsigned long long *id,
                                        CUgraph *graph, const CUgraphNode **dependencies,
                                        const void **edgeData, size_t *numDependencies);
  CUresult (*cuStreamGetCaptureInfo_v2)(CUstream stream, int *status, unsigned long long *id,
                                        CUgraph *graph, const CUgraphNode **dependencies,
                                        size_t *numDependencies);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph,
                                          unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream);
  // _v2 (CUDA 12 on), else the original, which reads the v1 fields.
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec exec, CUgraphNode node,
                                             const KernelNodeParams *params);
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec);
  CUresult (*cuGraphDestroy)(CUgraph graph);
  // Events, for profiles only: null where the driver lacks them.
  CUresult (*cuEventCreate)(CUevent *event, unsigned flags);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float *milliseconds, CUevent start, CUevent end); // _v2 from 12.8
  CUresult (*cuEventDestroy)(CUevent event);                                       // _v2
  // Multi-rank runs (the collectives' watchdog, column gathers): null where
  // the driver lacks them.
  CUresult (*cuStreamQuery)(CUstream stream);
  CUresult (*cuEventQuery)(CUevent event);
  CUresult (*cuMemcpy2DAsync)(const Memcpy2D *copy, CUstream stream); // _v2
  // Peer exchange memory and persistent kernels: null where the driver
  // lacks them.
  CUresult (*cuIpcGetMemHandle)(IpcMemHandle *handle, CUdeviceptr address);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *address, IpcMemHandle handle,
                                 unsigned flags); // _v2
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr address);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, CUfunction function,
                                                          int blockSize, size_t sharedBytes);
  // Tensor maps (CUDA 12.0 on): null where the driver lacks it; artifacts
  // with tensor maps are then refused when their launches are prepared.
  CUresult (*cuTensorMapEncodeTiled)(TensorMap *map, int dataType, uint32_t rank,
                                     void *globalAddress, const uint64_t *globalDim,
                                     const uint64_t *globalStrides, const uint32_t *boxDim,
                                     const uint32_t *elementStrides, int interleave, int swizzle,
                                     int l2Promotion, int oobFill);
};

// No usable driver or device: a one-line reason ("no CUDA driver
// (libcuda.so.1)").
class CudaUnavailable : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

// The name of a CUresult ("CUDA_ERROR_NO_DEVICE") as this runtime knows it
// without a driver, or "CUDA error N".
std::string knownCudaErrorName(CUresult result);

class CudaDriver {
public:
  // The name the process's driver is loaded by.
  static constexpr const char *kLibrary = "libcuda.so.1";

  // The driver of this process: kLibrary, loaded and initialised on the
  // first call; later calls return it, or throw the same CudaUnavailable.
  static std::shared_ptr<const CudaDriver> system();
  // The driver at `library` (a name for dlopen or a path): loaded, every
  // entry point resolved and cuInit called. Throws CudaUnavailable saying
  // why not: no such library, a stub (the toolkit's link-time stand-in),
  // no device, a driver too old. The library is never unloaded.
  static std::shared_ptr<const CudaDriver> load(const std::string &library);

  const CudaApi &api() const { return api_; }
  // cuDriverGetVersion: 12040 for CUDA 12.4.
  int version() const { return version_; }
  const std::string &library() const { return library_; }
  // "the CUDA driver 12.4 (libcuda.so.1)", for messages.
  std::string name() const;

  // "CUDA_ERROR_OUT_OF_MEMORY: out of memory".
  std::string describe(CUresult result) const;
  // Throws RuntimeError "<context>: <call>: <describe(result)>" (without
  // "<context>: " when it is empty) unless `result` is success.
  void check(CUresult result, std::string_view call,
             const std::string &context = std::string()) const;

private:
  CudaDriver() = default;

  CudaApi api_{};
  int version_ = 0;
  std::string library_;
};

} // namespace kiln::cuda
