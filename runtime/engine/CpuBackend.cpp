#include "runtime/engine/CpuBackend.h"

#include "runtime/comm/HostCollectives.h"

#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <cstring>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

// Why this CPU cannot run the target's kernels, or "".
std::string cpuSupport(const fb::Target &target) {
  std::vector<std::string> unknown, missing;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features) {
      const std::optional<bool> has = cpuHasFeature(feature->string_view());
      if (!has)
        unknown.push_back(feature->str());
      else if (!*has)
        missing.push_back(feature->str());
    }
  auto list = [](const std::vector<std::string> &names) {
    std::string text;
    for (const std::string &name : names)
      text += (text.empty() ? "" : ", ") + name;
    return text;
  };
  if (!missing.empty())
    return "the CPU lacks " + list(missing);
  if (!unknown.empty())
    return "this runtime does not know the CPU feature(s) " + list(unknown);
  return "";
}

// A --cpu that runs here: the host's own, or its x86-64 level anywhere.
std::string cpuRemedy() {
  return "rebuild it for this CPU: kilnc --target=x86 --cpu=host on this machine, or "
         "--cpu=" +
         hostX86Level() + " for any CPU of its level";
}

void *pointer(DeviceAddress address) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(address));
}

// One launch: its kernel, and argument storage that does not move. Per part
// the argument array holds a pointer to each buffer's descriptor (shared by
// the parts) and to that part's copy of the scalars.
class CpuLaunch final : public PreparedLaunch {
public:
  CpuLaunch(KernelFn fn, const LaunchSpec &spec, int parts)
      : fn_(fn), ranks_(spec.ranks), parts_(parts), descriptors_(spec.ranks.size()),
        scalars_(static_cast<size_t>(parts) * spec.scalarKinds.size()),
        args_(static_cast<size_t>(parts) * stride(spec)) {
    const size_t numBuffers = ranks_.size();
    const size_t numScalars = spec.scalarKinds.size();
    for (size_t s = 0; s < numScalars; ++s) {
      if (spec.scalarKinds[s] == fb::ScalarKind::Part)
        partScalars_.push_back(s);
      else if (spec.scalarKinds[s] == fb::ScalarKind::Parts)
        partsScalars_.push_back(s);
    }
    for (int part = 0; part < parts_; ++part) {
      void **args = &args_[part * stride(spec)];
      for (size_t b = 0; b < numBuffers; ++b)
        args[b] = descriptors_[b].bytes;
      for (size_t s = 0; s < numScalars; ++s)
        args[numBuffers + s] = &scalars_[part * numScalars + s];
    }
  }

  void run(ThreadPool &pool, const LaunchCall &call) {
    const size_t numBuffers = ranks_.size();
    for (size_t b = 0; b < numBuffers; ++b)
      memref::buildDescriptor(descriptors_[b], pointer(call.buffers[b].address),
                              call.buffers[b].sizes, ranks_[b]);
    const size_t numScalars = scalars_.size() / parts_;
    for (int part = 0; part < parts_; ++part) {
      int64_t *values = &scalars_[part * numScalars];
      std::copy(call.scalars, call.scalars + numScalars, values);
      for (size_t s : partScalars_)
        values[s] = part;
      for (size_t s : partsScalars_)
        values[s] = parts_;
    }
    const size_t step = numBuffers + numScalars;
    if (parts_ == 1) {
      fn_(args_.data());
      return;
    }
    pool.run(parts_, [&](int part) { fn_(args_.data() + part * step); });
  }

private:
  static size_t stride(const LaunchSpec &spec) {
    return spec.ranks.size() + spec.scalarKinds.size();
  }

  KernelFn fn_;
  std::vector<int> ranks_;
  int parts_;
  std::vector<size_t> partScalars_, partsScalars_;
  std::vector<memref::DescriptorStorage> descriptors_;
  std::vector<int64_t> scalars_; // parts x scalars
  std::vector<void *> args_;     // parts x (buffers + scalars)
};

} // namespace

std::unique_ptr<CpuBackend> CpuBackend::create(const Artifact &artifact, ThreadPool &pool) {
  checkTarget(artifact, fb::TargetKind::X86, cpuSupport, cpuRemedy());
  std::vector<std::string> features;
  if (const auto *list = artifact->target()->features())
    for (const flatbuffers::String *feature : *list)
      features.push_back(feature->str());
  if (needsAmx(features)) {
    if (!cpuHasAmx())
      throw RuntimeError(artifact.source() + ": the kernels need AMX, which this CPU lacks");
    requestAmx();
  }
  return std::unique_ptr<CpuBackend>(new CpuBackend(pool));
}

std::string CpuBackend::description() const {
  return "CPU (" + std::to_string(pool_.numThreads()) + " threads)";
}

DeviceAddress CpuBackend::allocate(uint64_t bytes, const std::string &what) {
  return adopt(AlignedBuffer(static_cast<size_t>(bytes), what), what);
}

DeviceAddress CpuBackend::adopt(AlignedBuffer host, const std::string &) {
  if (host.empty())
    return 0;
  const auto address = static_cast<DeviceAddress>(reinterpret_cast<uintptr_t>(host.data()));
  memory_.emplace(address, std::move(host));
  return address;
}

void CpuBackend::release(DeviceAddress address) noexcept { memory_.erase(address); }

void CpuBackend::upload(DeviceAddress to, const void *from, uint64_t bytes) {
  if (bytes)
    std::memcpy(pointer(to), from, static_cast<size_t>(bytes));
}

void CpuBackend::download(void *to, DeviceAddress from, uint64_t bytes) {
  if (bytes)
    std::memcpy(to, pointer(from), static_cast<size_t>(bytes));
}

void CpuBackend::fill(DeviceAddress to, uint8_t value, uint64_t bytes) {
  if (bytes)
    std::memset(pointer(to), value, static_cast<size_t>(bytes));
}

void CpuBackend::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) {
  if (bytes)
    std::memmove(pointer(to), pointer(from), static_cast<size_t>(bytes));
}

void CpuBackend::loadKernels(const Artifact &artifact) {
  if (artifact.numKernels() == 0)
    return;
  const auto *blob = artifact->library()->blob();
  library_.emplace(KernelLibrary::load(blob->data(), blob->size(), artifact.source()));
  for (const fb::Kernel *kernel : *artifact->kernels())
    kernels_.push_back(library_->resolve(kernel->name()->str())); // the symbol
}

std::unique_ptr<PreparedLaunch> CpuBackend::prepare(const LaunchSpec &spec) {
  // GPU features: the artifact's checks keep them out of x86 artifacts.
  if (spec.sharedBytes > 0)
    throw RuntimeError(spec.where + ": " + std::to_string(spec.sharedBytes) +
                       " bytes of dynamic shared memory, which x86 kernels do not have");
  if (!spec.tensorMaps.empty() || std::find(spec.scalarKinds.begin(), spec.scalarKinds.end(),
                                            fb::ScalarKind::TensorMap) != spec.scalarKinds.end())
    throw RuntimeError(spec.where + ": TensorMap scalars are CUDA tensor maps, for nvptx "
                                    "artifacts; x86 kernels take none");
  const int parts = static_cast<int>(std::max<uint32_t>(
      std::min<uint32_t>(spec.maxParts, static_cast<uint32_t>(pool_.numThreads())), 1));
  return std::make_unique<CpuLaunch>(kernels_.at(spec.kernel), spec, parts);
}

void CpuBackend::launch(PreparedLaunch &launch, const LaunchCall &call) {
  static_cast<CpuLaunch &>(launch).run(pool_, call);
}

std::unique_ptr<Collectives> CpuBackend::connect(const RankInfo &rank,
                                                 std::vector<CommGroupSpec> groups,
                                                 uint64_t capacityBytes) {
  return std::make_unique<HostCollectives>(rank, std::move(groups), capacityBytes);
}

} // namespace kiln
