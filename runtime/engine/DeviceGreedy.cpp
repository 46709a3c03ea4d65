#include "runtime/engine/DeviceGreedy.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Sampler.h"

#include <algorithm>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr const char *kKernel = "kiln_greedy_keys";
constexpr uint32_t kBlock = 128;
// Blocks per row: about 16 entries a thread, at most 64 blocks (a row's
// 8192 threads end in 256 atomics on its key).
constexpr int64_t kEntriesPerThread = 16, kMaxBlocksPerRow = 64;

} // namespace

std::unique_ptr<DeviceGreedy> DeviceGreedy::create(Backend &backend, const Artifact &artifact,
                                                   int64_t maxRows) {
  const std::optional<uint32_t> kernel = artifact.findKernel(kKernel);
  if (!kernel)
    return nullptr;
  LaunchSpec spec;
  spec.kernel = *kernel;
  spec.where = std::string("greedy token choice (") + kKernel + ")";
  spec.ranks = {1, 1};
  spec.scalarKinds = {fb::ScalarKind::Constant, fb::ScalarKind::Constant};
  spec.block = kBlock;
  spec.maxGrid = maxRows * kMaxBlocksPerRow;
  DeviceMemory keys =
      DeviceMemory::allocate(backend, static_cast<uint64_t>(maxRows) * 8, "greedy token keys");
  return std::unique_ptr<DeviceGreedy>(
      new DeviceGreedy(backend, backend.prepare(spec), std::move(keys)));
}

std::vector<int32_t> DeviceGreedy::choose(DeviceAddress logits, int64_t rows, int64_t vocab) {
  if (rows < 1 || static_cast<uint64_t>(rows) * 8 > keys_.size())
    throw RuntimeError("greedy token choice: " + std::to_string(rows) + " rows, room for " +
                       std::to_string(keys_.size() / 8));
  const int64_t threads = (vocab + kEntriesPerThread - 1) / kEntriesPerThread;
  const int64_t blocksPerRow =
      std::clamp<int64_t>((threads + kBlock - 1) / kBlock, 1, kMaxBlocksPerRow);
  backend_.fill(keys_.address(), 0, static_cast<uint64_t>(rows) * 8);
  BufferArgument args[2];
  args[0].address = logits;
  args[0].rank = 1;
  args[0].sizes[0] = rows * vocab;
  args[1].address = keys_.address();
  args[1].rank = 1;
  args[1].sizes[0] = rows;
  const int64_t scalars[2] = {rows, vocab};
  LaunchCall call;
  call.buffers = args;
  call.scalars = scalars;
  call.grid = rows * blocksPerRow;
  backend_.launch(*launch_, call);
  std::vector<uint64_t> keys(static_cast<size_t>(rows));
  backend_.download(keys.data(), keys_.address(), static_cast<uint64_t>(rows) * 8);
  std::vector<int32_t> tokens(keys.size());
  for (size_t r = 0; r < keys.size(); ++r) {
    // The low word holds the index's complement; a row of no number kept
    // the index `vocab` (or was never written): NaN only, as argmax refuses.
    const auto index = static_cast<int64_t>(~static_cast<uint32_t>(keys[r]));
    if (keys[r] == 0 || index >= vocab)
      throw RuntimeError("greedy token choice, row " + std::to_string(r) + ": " +
                         allNanLogits(vocab));
    tokens[r] = static_cast<int32_t>(index);
  }
  return tokens;
}

} // namespace kiln
