#include "runtime/safetensors/Checkpoint.h"

#include "runtime/core/InputFile.h"

#include "runtime/core/AtomicFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <set>

#include <fcntl.h>
#include <unistd.h>

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Index files list one line per tensor; even a model of a million tensors
// stays far below this.
constexpr uintmax_t kMaxIndexSize = uintmax_t{1} << 30;
constexpr size_t kProgressChunk = size_t{64} << 20;

std::string joinPath(const std::string &dir, const std::string &name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Shard names come from a file we do not trust: they must name a file in the
// checkpoint directory itself.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos &&
         name.find("..") == std::string::npos;
}

std::string readIndexFile(const std::string &path) {
  if (std::string problem = inputFileProblem(path); !problem.empty())
    throw SafetensorsError(path + ": cannot read: " + problem);
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (error)
    throw SafetensorsError(path + ": cannot read: " + error.message());
  if (size > kMaxIndexSize)
    throw SafetensorsError(path + ": index of " + std::to_string(size) +
                           " bytes is implausibly large");
  try {
    return readInputFile(path, kMaxIndexSize, "a shard index");
  } catch (const std::runtime_error &error) {
    throw SafetensorsError(std::string("cannot read: ") + error.what());
  }
}

// Optional "metadata.total_size": a non-negative integer (some writers emit
// it as an integral float).
std::optional<uint64_t> parseTotalSize(const std::string &indexPath, const json &index) {
  auto metadata = index.find("metadata");
  if (metadata == index.end())
    return std::nullopt;
  if (!metadata->is_object())
    throw SafetensorsError(indexPath + ": 'metadata' is not a JSON object");
  auto total = metadata->find("total_size");
  if (total == metadata->end())
    return std::nullopt;
  if (total->is_number_unsigned())
    return total->get<uint64_t>();
  if (total->is_number_float()) {
    const double value = total->get<double>();
    if (value >= 0 && value < 9007199254740992.0 && std::floor(value) == value)
      return static_cast<uint64_t>(value);
  }
  throw SafetensorsError(indexPath + ": 'metadata.total_size' is not a non-negative integer");
}

// tensor name -> shard file name, validated.
std::map<std::string, std::string> parseWeightMap(const std::string &indexPath, const json &index) {
  auto weightMap = index.find("weight_map");
  if (weightMap == index.end())
    throw SafetensorsError(indexPath + ": missing 'weight_map'");
  if (!weightMap->is_object())
    throw SafetensorsError(indexPath + ": 'weight_map' is not a JSON object");
  std::map<std::string, std::string> result;
  for (const auto &item : weightMap->items()) {
    if (!item.value().is_string())
      throw SafetensorsError(indexPath + ": 'weight_map' entry of tensor " + quoteName(item.key()) +
                             " is not a string");
    const std::string &file = item.value().get_ref<const std::string &>();
    if (!isPlainFileName(file))
      throw SafetensorsError(indexPath + ": 'weight_map' entry of tensor " + quoteName(item.key()) +
                             " names " + quoteName(file) + ", which is not a plain file name");
    result.emplace(item.key(), file);
  }
  return result;
}

// The index through the one atomic writer, failing as the checkpoint does.
void writeTextAtomically(const std::string &path, const std::string &text) {
  try {
    writeFileAtomically(path, text);
  } catch (const FileWriteError &error) {
    throw SafetensorsError(error.what());
  }
}

// Streams tensor `index` into the writer of its shard.
using TensorFeed = std::function<void(size_t index, SafetensorsWriter &writer)>;

std::vector<std::string> writeSharded(const std::string &dir,
                                      const std::vector<TensorDecl> &tensors,
                                      const TensorFeed &feed, uint64_t maxShardBytes,
                                      const SafetensorsMetadata &metadata,
                                      const WriteProgress &progress) {
  if (maxShardBytes == 0)
    throw SafetensorsError(dir + ": maxShardBytes must be positive");
  // Validate names and sizes over the whole checkpoint before writing
  // anything (each shard writer only sees its own tensors).
  std::vector<uint64_t> sizes;
  std::set<std::string_view> names;
  uint64_t totalBytes = 0;
  for (const TensorDecl &tensor : tensors) {
    const std::string what = dir + ": tensor " + quoteName(tensor.name);
    if (!names.insert(tensor.name).second)
      throw SafetensorsError(what + ": duplicate tensor name");
    sizes.push_back(tensorByteSize(tensor.dtype, tensor.shape, what));
    if (__builtin_add_overflow(totalBytes, sizes.back(), &totalBytes))
      throw SafetensorsError(what + ": total size overflows 64 bits");
  }

  // Greedy split in the given order.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shardBytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!shards.back().empty() && sizes[i] > maxShardBytes - std::min(shardBytes, maxShardBytes)) {
      shards.emplace_back();
      shardBytes = 0;
    }
    shards.back().push_back(i);
    shardBytes += sizes[i];
  }

  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw SafetensorsError(dir + ": cannot create directory: " + error.message());

  std::vector<std::string> fileNames;
  json weightMap = json::object();
  uint64_t done = 0;
  if (progress)
    progress(0, totalBytes);
  for (size_t s = 0; s < shards.size(); ++s) {
    fileNames.push_back(shardFileName(s + 1, shards.size()));
    std::vector<TensorDecl> decls;
    for (size_t i : shards[s]) {
      decls.push_back(tensors[i]);
      weightMap[tensors[i].name] = fileNames.back();
    }
    WriteProgress shardProgress;
    if (progress)
      shardProgress = [&, base = done](uint64_t shardDone, uint64_t) {
        progress(base + shardDone, totalBytes);
      };
    SafetensorsWriter writer(joinPath(dir, fileNames.back()), std::move(decls), metadata,
                             shardProgress);
    for (size_t i : shards[s])
      feed(i, writer);
    writer.finish();
    done += writer.dataSize();
  }

  json index = {{"metadata", {{"total_size", totalBytes}}}, {"weight_map", std::move(weightMap)}};
  writeTextAtomically(joinPath(dir, Checkpoint::kIndexFileName), index.dump(2) + "\n");
  return fileNames;
}

} // namespace

std::string shardFileName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index, count);
  return name;
}

void Checkpoint::addFile(SafetensorsFile file) {
  files_.push_back(std::move(file));
  const SafetensorsFile &added = files_.back();
  for (const TensorInfo &info : added.tensors())
    totalBytes_ += info.size;
}

Checkpoint Checkpoint::open(const std::string &dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error))
    throw SafetensorsError(dir + ": not a checkpoint directory");
  const std::string indexPath = joinPath(dir, kIndexFileName);
  const std::string singlePath = joinPath(dir, kSingleFileName);
  const bool hasIndex = fs::exists(indexPath, error);
  const bool hasSingle = fs::exists(singlePath, error);
  if (hasIndex && hasSingle)
    // Loaders disagree on which one wins; refuse rather than guess.
    throw SafetensorsError(dir + ": both " + kSingleFileName + " and " + kIndexFileName + " exist");
  if (!hasIndex && !hasSingle)
    throw SafetensorsError(dir + ": neither " + std::string(kSingleFileName) + " nor " +
                           kIndexFileName + " found");

  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  if (hasSingle) {
    checkpoint.addFile(SafetensorsFile::open(singlePath));
    const std::vector<TensorInfo> &tensors = checkpoint.files_[0].tensors();
    for (size_t t = 0; t < tensors.size(); ++t)
      checkpoint.byName_.emplace(tensors[t].name, std::make_pair(size_t{0}, t));
    return checkpoint;
  }

  checkpoint.sharded_ = true;
  const json index = parseJsonRejectingDuplicates(readIndexFile(indexPath), indexPath);
  if (!index.is_object())
    throw SafetensorsError(indexPath + ": not a JSON object");
  const std::optional<uint64_t> totalSize = parseTotalSize(indexPath, index);
  const std::map<std::string, std::string> weightMap = parseWeightMap(indexPath, index);

  // Shard file name -> first tensor mapped to it (for error messages).
  std::map<std::string, std::string> fileNames;
  for (const auto &[tensor, file] : weightMap)
    fileNames.emplace(file, tensor);
  std::vector<std::string> names;
  for (const auto &[file, tensor] : fileNames) {
    const std::string shardPath = joinPath(dir, file);
    if (!fs::is_regular_file(shardPath, error))
      throw SafetensorsError(indexPath + ": shard " + quoteName(file) + " of tensor " +
                             quoteName(tensor) + " is missing (no regular file " + shardPath + ")");
    names.push_back(file);
    checkpoint.addFile(SafetensorsFile::open(shardPath));
  }

  // Every tensor stored in some shard, in one shard only, and exactly where
  // the weight_map says.
  for (size_t f = 0; f < checkpoint.files_.size(); ++f) {
    const std::vector<TensorInfo> &tensors = checkpoint.files_[f].tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      const std::string &name = tensors[t].name;
      auto [it, inserted] = checkpoint.byName_.emplace(name, std::make_pair(f, t));
      if (!inserted)
        throw SafetensorsError(indexPath + ": tensor " + quoteName(name) + " is stored in both " +
                               quoteName(names[it->second.first]) + " and " + quoteName(names[f]));
      auto mapped = weightMap.find(name);
      if (mapped == weightMap.end())
        throw SafetensorsError(indexPath + ": tensor " + quoteName(name) + " of " +
                               quoteName(names[f]) + " is missing from the weight_map");
    }
  }
  for (const auto &[name, file] : weightMap) {
    auto stored = checkpoint.byName_.find(name);
    if (stored == checkpoint.byName_.end())
      throw SafetensorsError(indexPath + ": tensor " + quoteName(name) + " is mapped to " +
                             quoteName(file) + " but that file does not contain it");
    const std::string &actual = names[stored->second.first];
    if (actual != file)
      throw SafetensorsError(indexPath + ": tensor " + quoteName(name) + " is mapped to " +
                             quoteName(file) + " but stored in " + quoteName(actual));
  }
  if (totalSize && *totalSize != checkpoint.totalBytes_)
    throw SafetensorsError(indexPath + ": metadata.total_size is " + std::to_string(*totalSize) +
                           " but the tensors hold " + std::to_string(checkpoint.totalBytes_) +
                           " bytes");
  return checkpoint;
}

std::vector<std::string> Checkpoint::tensorNames() const {
  std::vector<std::string> names;
  names.reserve(byName_.size());
  for (const auto &entry : byName_)
    names.push_back(entry.first);
  return names;
}

CheckpointTensor Checkpoint::find(std::string_view name) const {
  auto it = byName_.find(name);
  if (it == byName_.end())
    return {};
  const SafetensorsFile &file = files_[it->second.first];
  const TensorInfo &info = file.tensors()[it->second.second];
  return {&info, file.bytes(info), &file};
}

std::vector<std::string> writeShardedCheckpoint(const std::string &dir,
                                                const std::vector<TensorData> &tensors,
                                                uint64_t maxShardBytes,
                                                const SafetensorsMetadata &metadata,
                                                const WriteProgress &progress) {
  std::vector<TensorDecl> decls = declarationsOf(dir, tensors);
  auto feed = [&](size_t index, SafetensorsWriter &writer) {
    const ByteView bytes = tensors[index].bytes;
    for (size_t done = 0; done < bytes.size; done += kProgressChunk)
      writer.append(bytes.data + done, std::min(kProgressChunk, bytes.size - done));
  };
  return writeSharded(dir, decls, feed, maxShardBytes, metadata, progress);
}

std::vector<std::string> writeShardedCheckpoint(const std::string &dir,
                                                const std::vector<TensorDecl> &tensors,
                                                const TensorFill &fill, uint64_t maxShardBytes,
                                                const SafetensorsMetadata &metadata,
                                                const WriteProgress &progress) {
  std::unique_ptr<uint8_t[]> buffer;
  uint64_t capacity = 0;
  auto feed = [&](size_t index, SafetensorsWriter &writer) {
    const TensorDecl &tensor = tensors[index];
    const uint64_t size = tensorByteSize(tensor.dtype, tensor.shape);
    if (size > std::numeric_limits<size_t>::max())
      throw SafetensorsError(dir + ": tensor " + quoteName(tensor.name) +
                             " is too large for memory");
    if (!buffer || size > capacity) {
      capacity = std::max<uint64_t>(size, 1);
      buffer.reset(new uint8_t[capacity]); // fill() writes every byte
    }
    fill(index, buffer.get());
    writer.append(buffer.get(), static_cast<size_t>(size));
  };
  return writeSharded(dir, tensors, feed, maxShardBytes, metadata, progress);
}

} // namespace kiln
