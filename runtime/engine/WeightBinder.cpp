#include "runtime/engine/WeightBinder.h"

#include "runtime/core/QuoteName.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/WeightLayout.h"
#include "runtime/engine/WeightSource.h"
#include "runtime/safetensors/DecoderTensors.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

namespace kiln {
namespace {

constexpr const char *kExpertPattern = "{e}";

// Elements of one tensor; RuntimeError on a negative size or overflow.
uint64_t elementCount(const WeightSpec &spec) {
  uint64_t count = 1;
  for (int64_t size : spec.shape) {
    if (size < 0)
      throw RuntimeError("weight " + quoteName(spec.name) + ": negative size " +
                         std::to_string(size) + " in its shape");
    if (size != 0 && count > std::numeric_limits<uint64_t>::max() / 4 / static_cast<uint64_t>(size))
      throw RuntimeError("weight " + quoteName(spec.name) + ": shape too large");
    count *= static_cast<uint64_t>(size);
  }
  return count;
}

// Bytes of one tensor of the spec after slice and transform.
uint64_t boundTensorBytes(const WeightSpec &spec) {
  return elementCount(spec) / static_cast<uint64_t>(spec.sliceCount) *
         static_cast<uint64_t>(dtypeSize(spec.dtype));
}

// The spec on its own: name, slice, transform and byte count agree.
void checkSpec(const WeightSpec &spec) {
  const std::string what = "weight " + quoteName(spec.name);
  const bool isStack = spec.name.find(kExpertPattern) != std::string::npos;
  if (isStack != (spec.stack > 0))
    throw RuntimeError(what + ": stack " + std::to_string(spec.stack) +
                       (isStack ? " with" : " without") + " '{e}' in the name");
  const int rank = static_cast<int>(spec.shape.size());
  if (spec.sliceCount < 1)
    throw RuntimeError(what + ": slice_count " + std::to_string(spec.sliceCount) +
                       " is not positive");
  if (spec.sliceCount > 1) {
    if (spec.sliceDim < 0 || spec.sliceDim >= rank)
      throw RuntimeError(what + ": slice_dim " + std::to_string(spec.sliceDim) +
                         " is outside its rank " + std::to_string(rank));
    if (spec.shape[spec.sliceDim] % spec.sliceCount != 0)
      throw RuntimeError(what + ": dimension " + std::to_string(spec.sliceDim) + " of size " +
                         std::to_string(spec.shape[spec.sliceDim]) + " does not split into " +
                         std::to_string(spec.sliceCount) + " pieces");
    if (spec.sliceIndex < 0 || spec.sliceIndex >= spec.sliceCount)
      throw RuntimeError(what + ": piece " + std::to_string(spec.sliceIndex) + " of " +
                         std::to_string(spec.sliceCount));
  } else if (spec.sliceDim < -1 || spec.sliceDim >= rank) {
    throw RuntimeError(what + ": slice_dim " + std::to_string(spec.sliceDim) +
                       " is outside its rank " + std::to_string(rank));
  }
  if (spec.transform == WeightTransform::VnniBf16) {
    if (spec.dtype != DType::BF16 || rank != 2)
      throw RuntimeError(what + ": VnniBf16 needs a BF16 matrix, not " +
                         describeTensorType({spec.dtype, spec.shape}));
    std::vector<int64_t> sliced = spec.shape;
    if (spec.sliceCount > 1)
      sliced[spec.sliceDim] /= spec.sliceCount;
    if (sliced[0] % 16 != 0 || sliced[1] % 32 != 0)
      throw RuntimeError(what +
                         ": VnniBf16 needs [N, K] with N % 16 == 0 "
                         "and K % 32 == 0, the slice is [" +
                         std::to_string(sliced[0]) + ", " + std::to_string(sliced[1]) + "]");
  } else if (spec.transform != WeightTransform::None) {
    throw RuntimeError(what + ": unknown transform " +
                       std::to_string(static_cast<int>(spec.transform)));
  }
  const uint64_t expected = boundTensorBytes(spec) * std::max<uint64_t>(spec.stack, 1);
  if (expected != spec.bytes)
    throw RuntimeError(what + ": the artifact says " + std::to_string(spec.bytes) +
                       " bytes, its shape, stack " + "and slice give " + std::to_string(expected));
}

// One tensor to produce: a name and where its bytes go.
struct Item {
  size_t spec;
  std::string name;
  uint64_t offset; // into the spec's buffer
};

// "model.layers.3.mlp.experts.7.gate_proj" for any of that module's
// tensors (.weight, .weight_scale, .weight_scale_2, .input_scale).
std::string moduleOf(const std::string &name) {
  for (const char *suffix : {".weight_scale_2", ".weight_scale", ".input_scale", ".weight"}) {
    const size_t length = std::strlen(suffix);
    if (name.size() > length && name.compare(name.size() - length, length, suffix) == 0)
      return name.substr(0, name.size() - length);
  }
  return name;
}

void bindItem(const WeightSpec &spec, const std::string &name, const WeightSource &source,
              uint8_t *out, std::vector<uint8_t> &scratch, std::vector<uint8_t> &sliced) {
  ByteView bytes = source.read(name, scratch);
  const size_t elementSize = static_cast<size_t>(dtypeSize(spec.dtype));
  const bool slice = spec.sliceCount > 1;
  const bool vnni = spec.transform == WeightTransform::VnniBf16;
  if (!slice && !vnni) {
    std::memcpy(out, bytes.data, bytes.size);
    return;
  }
  std::vector<int64_t> shape = spec.shape;
  const uint8_t *matrix = bytes.data;
  if (slice) {
    uint8_t *target = out;
    if (vnni) {
      sliced.resize(bytes.size / static_cast<size_t>(spec.sliceCount));
      target = sliced.data();
    }
    slicePiece(bytes.data, shape, elementSize, spec.sliceDim, spec.sliceCount, spec.sliceIndex,
               target);
    shape[spec.sliceDim] /= spec.sliceCount;
    matrix = target;
  }
  if (vnni) {
    // Checkpoint bytes are only 2-byte aligned in general: copy when needed.
    if (reinterpret_cast<uintptr_t>(matrix) % alignof(uint16_t) != 0) {
      sliced.assign(matrix, matrix + shape[0] * shape[1] * 2);
      matrix = sliced.data();
    }
    vnniBf16Blocks(reinterpret_cast<const uint16_t *>(matrix), shape[0], shape[1],
                   reinterpret_cast<uint16_t *>(out));
  }
}

} // namespace

std::vector<std::string> tensorNames(const WeightSpec &spec) {
  if (spec.stack == 0)
    return {spec.name};
  const size_t at = spec.name.find(kExpertPattern);
  std::vector<std::string> names;
  for (uint32_t e = 0; e < spec.stack; ++e) {
    std::string name = spec.name;
    if (at != std::string::npos)
      name.replace(at, std::strlen(kExpertPattern), std::to_string(uint64_t{spec.firstExpert} + e));
    names.push_back(std::move(name));
  }
  return names;
}

void checkDecoderTensors(const std::vector<WeightSpec> &modelSpecs, const WeightSource &source) {
  int64_t last = -1;
  uint64_t experts = 0;
  for (const WeightSpec &spec : modelSpecs) {
    if (spec.stack > 0)
      experts = std::max(experts, uint64_t{spec.firstExpert} + spec.stack);
    for (const std::string &name : tensorNames(spec))
      last = std::max(last, decoderLayerOf(name));
  }
  if (last < 0)
    return;
  if (std::string problem = tensorsBeyond(source.tensorNames(), last, static_cast<int64_t>(experts),
                                          source.description(), "the artifact's model");
      !problem.empty())
    throw RuntimeError(problem);
}

void checkWeights(const std::vector<WeightSpec> &specs, const WeightSource &source) {
  for (const WeightSpec &spec : specs) {
    checkSpec(spec);
    const TensorType expected{spec.dtype, spec.shape};
    for (const std::string &name : tensorNames(spec)) {
      std::optional<TensorType> found = source.find(name);
      if (!found)
        throw RuntimeError("weight " + quoteName(name) + ": not in " + source.description());
      if (found->dtype != spec.dtype || found->shape != spec.shape)
        throw RuntimeError("weight " + quoteName(name) + ": the artifact expects " +
                           describeTensorType(expected) + ", " + source.description() + " has " +
                           describeTensorType(*found));
    }
  }
}

std::vector<AlignedBuffer> bindWeights(const std::vector<WeightSpec> &specs,
                                       const WeightSource &source, ThreadPool *pool,
                                       const BindProgress &progress) {
  checkWeights(specs, source);

  std::vector<AlignedBuffer> buffers;
  std::vector<Item> items;
  uint64_t total = 0;
  buffers.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec &spec = specs[i];
    buffers.emplace_back(spec.bytes, "weight '" + spec.name + "'");
    const uint64_t tensorBytes = boundTensorBytes(spec);
    uint64_t offset = 0;
    for (std::string &name : tensorNames(spec)) {
      items.push_back({i, std::move(name), offset});
      offset += tensorBytes;
    }
    total += spec.bytes;
  }

  // The tensors of one quantised module (its codes and scales, which sit in
  // different bindings) go to the same thread one after another: a source
  // that derives them together (synthetic weights quantise a module once per
  // thread) then does that work once, not once per tensor.
  std::map<std::string, std::vector<size_t>> byModule;
  for (size_t i = 0; i < items.size(); ++i)
    byModule[moduleOf(items[i].name)].push_back(i);
  std::vector<std::vector<size_t>> groups;
  for (auto &[module, members] : byModule)
    groups.push_back(std::move(members));

  std::mutex progressMutex;
  uint64_t done = 0;
  if (progress)
    progress(0, total);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&](int) {
    std::vector<uint8_t> scratch, sliced;
    size_t member = 0, group = 0;
    while (!failed.load(std::memory_order_relaxed)) {
      if (member == 0)
        group = next.fetch_add(1);
      if (group >= groups.size())
        return;
      const size_t index = groups[group][member];
      member = member + 1 == groups[group].size() ? 0 : member + 1;
      const Item &item = items[index];
      const WeightSpec &spec = specs[item.spec];
      try {
        bindItem(spec, item.name, source, buffers[item.spec].data() + item.offset, scratch, sliced);
      } catch (...) {
        failed = true; // the others stop at their next tensor
        throw;
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        done += boundTensorBytes(spec);
        progress(done, total);
      }
    }
  };
  if (pool)
    pool->run(pool->numThreads(), work);
  else
    work(0);
  return buffers;
}

} // namespace kiln

namespace kiln {

BindProgress progressLines(std::FILE *out) {
  const auto start = std::chrono::steady_clock::now();
  auto lastTenth = std::make_shared<int>(-1);
  return [out, start, lastTenth](uint64_t done, uint64_t total) {
    const int tenth = total ? static_cast<int>(done * 10 / total) : 10;
    if (tenth == *lastTenth)
      return;
    *lastTenth = tenth;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(out, "loading weights: %3d%% of %.1f GiB (%.0f s)\n", tenth * 10,
                 double(total) / double(1ull << 30), seconds);
  };
}

} // namespace kiln
