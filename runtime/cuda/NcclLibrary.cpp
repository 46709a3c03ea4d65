#include "runtime/cuda/NcclLibrary.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace kiln::cuda {

std::shared_ptr<const NcclLibrary> NcclLibrary::load() {
  static std::mutex mutex;
  static std::weak_ptr<const NcclLibrary> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto library = loaded.lock())
    return library;
  const char *override = std::getenv("KILN_NCCL_LIBRARY");
  const std::string path = override && *override ? override : kLibrary;
  std::shared_ptr<NcclLibrary> library(new NcclLibrary());
  library->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library->handle_)
    throw RuntimeError("no NCCL (" + path + ": " + ::dlerror() +
                       "): multi-rank artifacts on NVIDIA GPUs need it; put its directory on "
                       "LD_LIBRARY_PATH or name the file in KILN_NCCL_LIBRARY");
  std::string missing;
  auto need = [&](auto &slot, const char *name) {
    slot =
        reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(library->handle_, name));
    if (!slot)
      missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  NcclApi &api = library->api_;
  need(api.ncclGetVersion, "ncclGetVersion");
  need(api.ncclGetUniqueId, "ncclGetUniqueId");
  need(api.ncclCommInitRank, "ncclCommInitRank");
  need(api.ncclCommAbort, "ncclCommAbort");
  need(api.ncclCommDestroy, "ncclCommDestroy");
  need(api.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  need(api.ncclGetErrorString, "ncclGetErrorString");
  need(api.ncclAllReduce, "ncclAllReduce");
  need(api.ncclAllGather, "ncclAllGather");
  need(api.ncclReduceScatter, "ncclReduceScatter");
  api.ncclCommSplit =
      reinterpret_cast<decltype(api.ncclCommSplit)>(::dlsym(library->handle_, "ncclCommSplit"));
  if (!missing.empty())
    throw RuntimeError(path + " lacks " + missing + " (the runtime needs NCCL 2.4 or newer)");
  api.ncclGetVersion(&library->version_);
  loaded = library;
  return library;
}

NcclLibrary::~NcclLibrary() {
  // NCCL keeps threads of its own; it is never unloaded.
}

std::string NcclLibrary::version() const {
  // 2.9 on: major * 10000 + minor * 100 + patch; before, * 1000 + * 100.
  const int major = version_ >= 10000 ? version_ / 10000 : version_ / 1000;
  const int minor = version_ >= 10000 ? version_ / 100 % 100 : version_ / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version_ % 100);
}

std::string NcclLibrary::describe(const char *call, ncclResult_t result) const {
  const char *text = api_.ncclGetErrorString ? api_.ncclGetErrorString(result) : nullptr;
  return std::string(call) + ": " + (text ? text : "error " + std::to_string(result)) +
         " (NCCL_DEBUG=WARN says more)";
}

} // namespace kiln::cuda
