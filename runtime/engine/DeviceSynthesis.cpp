#include "runtime/engine/DeviceSynthesis.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/SyntheticWeights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr const char *kBf16Kernel = "kiln_synth_bf16";
constexpr const char *kAmaxKernel = "kiln_synth_nvfp4_amax";
constexpr const char *kQuantKernel = "kiln_synth_nvfp4_quant";
constexpr uint32_t kGpuBlock = 128;
constexpr int64_t kMaxGpuGrid = 16384; // the kernels stride over the rest
// The amax kernel's parts each end in one atomic on the same word: fewer,
// longer parts.
constexpr int64_t kAmaxGrid = 1024;

int64_t bitsOf(double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// A tensor of a spec's stack, as the generator describes tensors.
TensorType typeOf(const WeightSpec &spec) { return TensorType{spec.dtype, spec.shape}; }

// The piece of a [rows, cols] tensor a spec keeps: its rows and columns and
// where they start (the full tensor is `fullCols` wide).
struct Piece {
  int64_t rows = 1, cols = 1, row0 = 0, col0 = 0, fullCols = 1;
};

// `shape` as [rows, cols] (a vector is one row), cut to the spec's slice;
// `colsPerElement` columns of values per stored element along the last axis
// (2 for NVFP4 codes). None where the slice does not fit this model.
std::optional<Piece> pieceOf(const WeightSpec &spec, int64_t rows, int64_t cols) {
  Piece piece{rows, cols, 0, 0, cols};
  if (spec.sliceCount <= 1)
    return piece;
  const int rank = static_cast<int>(spec.shape.size());
  const bool alongRows = rank == 2 && spec.sliceDim == 0;
  const bool alongCols = spec.sliceDim == rank - 1;
  if (alongRows && rows % spec.sliceCount == 0) {
    piece.rows = rows / spec.sliceCount;
    piece.row0 = piece.rows * spec.sliceIndex;
    return piece;
  }
  if (alongCols && cols % spec.sliceCount == 0) {
    piece.cols = cols / spec.sliceCount;
    piece.col0 = piece.cols * spec.sliceIndex;
    return piece;
  }
  return std::nullopt;
}

class Synthesizer {
public:
  Synthesizer(Backend &backend, const Artifact &artifact, const SyntheticWeightSource &source,
              uint32_t cpuParts)
      : backend_(backend), source_(source), cpu_(artifact->target()->kind() == fb::TargetKind::X86),
        cpuParts_(cpuParts) {
    bf16_ = prepare(artifact, kBf16Kernel, 1, 8);
    amax_ = prepare(artifact, kAmaxKernel, 1, 4);
    quant_ = prepare(artifact, kQuantKernel, 4, 8);
    amaxWord_ = DeviceMemory::allocate(backend_, 4, "synthesis: amax");
    scratch_ = DeviceMemory::allocate(backend_, 4, "synthesis: unbound global scale");
  }

  // A BF16 spec without transform, each tensor of the stack in turn.
  bool bf16(const WeightSpec &spec, DeviceAddress out) {
    if (spec.transform != WeightTransform::None || spec.shape.empty() || spec.shape.size() > 2)
      return false;
    const int64_t rows = spec.shape.size() == 2 ? spec.shape[0] : 1;
    const std::optional<Piece> piece = pieceOf(spec, rows, spec.shape.back());
    if (!piece)
      return false;
    const int64_t count = piece->rows * piece->cols;
    const uint64_t bytes = static_cast<uint64_t>(count) * 2;
    uint64_t at = 0;
    for (const std::string &name : tensorNames(spec)) {
      const SyntheticWeightSource::Normal dist = source_.bf16Distribution(name, typeOf(spec));
      const uint64_t key = source_.streamKey(source_.streamName(name));
      run(*bf16_, {buffer(out + at, count)},
          {static_cast<int64_t>(key), piece->rows, piece->cols, piece->fullCols, piece->row0,
           piece->col0, bitsOf(dist.mean), bitsOf(dist.stddev)},
          count);
      at += bytes;
    }
    return true;
  }

  // An NVFP4 projection's codes (`spec`), with its block scales and global
  // scales where bound (`scales`, `globals`: 0 if not).
  bool nvfp4(const WeightSpec &spec, DeviceAddress codes, const WeightSpec *scaleSpec,
             DeviceAddress scales, DeviceAddress globals) {
    if (spec.shape.size() != 2)
      return false;
    const std::vector<std::string> names = tensorNames(spec);
    uint64_t at = 0, scaleAt = 0;
    for (size_t e = 0; e < names.size(); ++e) {
      const SyntheticWeightSource::Nvfp4Module module = source_.nvfp4Module(names[e], typeOf(spec));
      if (spec.shape[0] != module.rows || spec.shape[1] * 2 != module.cols)
        return false;
      const std::optional<Piece> piece = pieceOf(spec, module.rows, module.cols);
      if (!piece || piece->col0 % 16 != 0 || piece->cols % 16 != 0)
        return false;
      if (scaleSpec &&
          (scaleSpec->sliceCount != spec.sliceCount || scaleSpec->sliceDim != spec.sliceDim ||
           scaleSpec->sliceIndex != spec.sliceIndex))
        return false;
      const uint64_t key = source_.streamKey(source_.streamName(names[e]));
      const int64_t blocks = piece->rows * piece->cols / 16;
      backend_.fill(amaxWord_.address(), 0, 4);
      run(*amax_, {buffer(amaxWord_.address(), 1)},
          {static_cast<int64_t>(key), module.rows * module.cols, bitsOf(module.distribution.mean),
           bitsOf(module.distribution.stddev)},
          module.rows * module.cols, kAmaxGrid);
      // Codes; the block scales go to a scratch stack when not bound.
      if (!scales) {
        if (!scaleScratch_.address() || scaleScratch_.size() < static_cast<uint64_t>(blocks))
          scaleScratch_ = DeviceMemory::allocate(backend_, static_cast<uint64_t>(blocks),
                                                 "synthesis: unbound block scales");
      }
      run(*quant_,
          {buffer(codes + at, blocks * 8),
           buffer(scales ? scales + scaleAt : scaleScratch_.address(), blocks),
           buffer(globals ? globals + 4 * e : scratch_.address(), 1),
           buffer(amaxWord_.address(), 1)},
          {static_cast<int64_t>(key), piece->rows, piece->cols, piece->fullCols, piece->row0,
           piece->col0, bitsOf(module.distribution.mean), bitsOf(module.distribution.stddev)},
          blocks);
      at += static_cast<uint64_t>(blocks) * 8;
      scaleAt += static_cast<uint64_t>(blocks);
    }
    return true;
  }

private:
  std::unique_ptr<PreparedLaunch> prepare(const Artifact &artifact, const char *name, int buffers,
                                          int scalars) {
    const std::optional<uint32_t> index = artifact.findKernel(name);
    if (!index)
      throw RuntimeError(artifact.source() + ": no kernel " + name +
                         " (rebuild the artifact with this kilnc to synthesise weights on "
                         "the device)");
    LaunchSpec spec;
    spec.kernel = *index;
    spec.where = std::string("synthetic weights (") + name + ")";
    spec.ranks.assign(static_cast<size_t>(buffers), 1);
    spec.scalarKinds.assign(static_cast<size_t>(scalars), fb::ScalarKind::Constant);
    if (cpu_) {
      spec.scalarKinds.push_back(fb::ScalarKind::Part);
      spec.scalarKinds.push_back(fb::ScalarKind::Parts);
      spec.maxParts = cpuParts_;
    } else {
      spec.block = kGpuBlock;
      spec.maxGrid = kMaxGpuGrid;
    }
    return backend_.prepare(spec);
  }

  static BufferArgument buffer(DeviceAddress address, int64_t elements) {
    BufferArgument argument;
    argument.address = address;
    argument.rank = 1;
    argument.sizes[0] = elements;
    return argument;
  }

  void run(PreparedLaunch &launch, std::vector<BufferArgument> buffers,
           std::vector<int64_t> scalars, int64_t work, int64_t maxGrid = kMaxGpuGrid) {
    if (cpu_) {
      scalars.push_back(0); // Part and Parts: the backend's
      scalars.push_back(0);
    }
    LaunchCall call;
    call.buffers = buffers.data();
    call.scalars = scalars.data();
    call.grid = std::clamp<int64_t>((work + kGpuBlock - 1) / kGpuBlock, 1, maxGrid);
    backend_.launch(launch, call);
  }

  Backend &backend_;
  const SyntheticWeightSource &source_;
  bool cpu_;
  uint32_t cpuParts_;
  std::unique_ptr<PreparedLaunch> bf16_, amax_, quant_;
  DeviceMemory amaxWord_, scratch_, scaleScratch_;
};

} // namespace

bool hasSynthesisKernels(const Artifact &artifact) {
  return artifact.findKernel(kBf16Kernel) && artifact.findKernel(kAmaxKernel) &&
         artifact.findKernel(kQuantKernel);
}

std::vector<DeviceMemory> synthesizeWeights(Backend &backend, const Artifact &artifact,
                                            const SyntheticWeightSource &source,
                                            const std::vector<WeightSpec> &specs, ThreadPool *pool,
                                            uint32_t cpuParts, const BindProgress &progress) {
  std::vector<DeviceMemory> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    out[i] = DeviceMemory::allocate(backend, specs[i].bytes, "weight '" + specs[i].name + "'");
  std::map<std::string, size_t> byName;
  for (size_t i = 0; i < specs.size(); ++i)
    byName.emplace(specs[i].name, i);
  // Another tensor of the same NVFP4 module ("...gate_proj" + suffix).
  auto sibling = [&](const std::string &module, const std::string &suffix) -> const size_t * {
    auto it = byName.find(module + suffix);
    return it == byName.end() ? nullptr : &it->second;
  };

  uint64_t total = 0, done = 0;
  for (const WeightSpec &spec : specs)
    total += spec.bytes;
  Synthesizer synthesizer(backend, artifact, source, cpuParts);
  std::vector<bool> covered(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec &spec = specs[i];
    if (spec.dtype == DType::BF16) {
      covered[i] = synthesizer.bf16(spec, out[i].address());
    } else if (const std::string module = source.streamName(spec.name);
               spec.dtype == DType::U8 && spec.name == module + ".weight") {
      const size_t *scales = sibling(module, ".weight_scale");
      const size_t *globals = sibling(module, ".weight_scale_2");
      covered[i] = synthesizer.nvfp4(spec, out[i].address(), scales ? &specs[*scales] : nullptr,
                                     scales ? out[*scales].address() : 0,
                                     globals ? out[*globals].address() : 0);
      if (covered[i]) {
        if (scales)
          covered[*scales] = true;
        if (globals)
          covered[*globals] = true;
      }
    }
    if (covered[i] && progress) {
      done += spec.bytes;
      progress(done, total);
    }
  }
  // The rest on the host, as the host path binds them.
  std::vector<WeightSpec> rest;
  std::vector<size_t> restAt;
  for (size_t i = 0; i < specs.size(); ++i)
    if (!covered[i]) {
      rest.push_back(specs[i]);
      restAt.push_back(i);
    }
  std::vector<AlignedBuffer> bound; // alive until the uploads are done
  if (!rest.empty()) {
    bound = bindWeights(rest, source, pool);
    for (size_t r = 0; r < rest.size(); ++r) {
      backend.upload(out[restAt[r]].address(), bound[r].data(), bound[r].size());
      done += rest[r].bytes;
    }
    if (progress)
      progress(done, total);
  }
  backend.synchronize();
  return out;
}

} // namespace kiln
