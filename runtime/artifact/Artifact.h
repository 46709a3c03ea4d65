// A loaded Kiln artifact: the file's bytes, checked once when loaded, and
// read in place through the flatbuffers accessors of kiln_artifact.fbs.
//
// An Artifact that exists is safe to read: the flatbuffer verifies (every
// offset, vector and string lies inside the bytes) and the rules of
// docs/runtime-abi.md hold: the schema major version is this runtime's, the
// required tables are present, every enum value is known, every index names
// something that exists, every arena buffer lies inside its entry point's
// arena at max_tokens, every size is computable without overflow, and so on
// (Artifact.cpp lists every check). Anything else is an ArtifactError with a
// one-line reason that starts with the file's name.
#pragma once

#include "runtime/artifact/ModelFacts.h"
#include "runtime/artifact/Version.h"
#include "runtime/artifact/kiln_artifact_generated.h"
#include "runtime/core/DType.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Every unreadable, malformed or unusable artifact, and every failure to
// write one, is reported with this.
class ArtifactError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Artifact {
public:
  // Reads the whole file at `path` and checks it.
  static Artifact load(const std::string &path);
  // Checks `bytes`; `source` names them in errors (a path, "<memory>").
  static Artifact fromBytes(std::vector<uint8_t> bytes, std::string source);

  Artifact(Artifact &&) = default;
  Artifact &operator=(Artifact &&) = default;
  Artifact(const Artifact &) = delete;
  Artifact &operator=(const Artifact &) = delete;

  // The flatbuffer root. Its version, target, model, layout, library and
  // entry_points are never null; weights, kv_caches and kernels may be.
  const artifact::Artifact &root() const { return *root_; }
  const artifact::Artifact *operator->() const { return root_; }

  // Where the bytes came from, as given to load or fromBytes.
  const std::string &source() const { return source_; }
  const std::vector<uint8_t> &bytes() const { return bytes_; }

  // Sizes of the optional vectors (0 when absent).
  size_t numWeights() const;
  size_t numKvCaches() const;
  size_t numKernels() const;

  // The entry point called `name`, or null.
  const artifact::EntryPoint *findEntryPoint(std::string_view name) const;
  // The entry point called `name`; an ArtifactError naming the ones there
  // are when it is missing.
  const artifact::EntryPoint &entryPoint(std::string_view name) const;
  // The index of the kernel called `name` (its symbol, "kiln_..."), or none:
  // for kernels the runtime launches itself (weight synthesis, greedy
  // choice), which no plan step names.
  std::optional<uint32_t> findKernel(std::string_view name) const;

  // What model.config_json says of the model (ModelFacts.h), read and
  // checked at load.
  const ModelFacts &modelFacts() const { return facts_; }

private:
  Artifact(std::vector<uint8_t> bytes, std::string source);

  std::vector<uint8_t> bytes_;
  std::string source_;
  ModelFacts facts_;
  // Points into bytes_ (a vector's heap buffer survives a move).
  const artifact::Artifact *root_ = nullptr;
};

// kiln::DType for the schema's DType (the same order); the value must be
// valid, which holds for every dtype of a loaded artifact.
DType toDType(artifact::DType dtype);

// round_up(constant + per_token * tokens, align). ArtifactError when the
// result overflows int64 or the Dim is invalid (negative parts, align < 1),
// neither of which happens for a loaded artifact with
// 0 <= tokens <= max_tokens.
int64_t evaluate(const artifact::Dim &dim, int64_t tokens);
// The buffer's shape evaluated at `tokens`.
std::vector<int64_t> evaluateShape(const artifact::BufferRef &ref, int64_t tokens);
// Bytes of the buffer's elements at `tokens` (product of the shape times the
// dtype size); ArtifactError on overflow. For a KvCache ref this uses the
// stored shape[0], which the runtime replaces with its slot count.
int64_t bufferBytes(const artifact::BufferRef &ref, int64_t tokens);

// A string field of the kernel's tiling (the JSON the compiler wrote beside
// it: "kind", "exchange", ...); empty where the tiling, the field or its
// string is missing.
std::string tilingField(const artifact::Kernel &kernel, std::string_view key);

// "x86", "nvptx", "amdgcn" (what kilnc --target takes).
std::string_view targetKindName(artifact::TargetKind kind);
// The KernelLibrary.format kilnc writes for a target kind:
// "elf-shared-object", "ptx", "hsaco".
std::string_view libraryFormatFor(artifact::TargetKind kind);
// "nvptx sm_90 (+ptx78)", "x86 sapphirerapids": kind, chip and, for GPUs,
// the code features (a CPU's are target.features, too many to list).
std::string describeTarget(const artifact::Target &target);

// Decides whether this machine can run the artifact's target (its kind is
// already known to match): returns "" when it can, else a short reason
// ("the CPU lacks amx-bf16").
using TargetSupportCheck = std::function<std::string(const artifact::Target &)>;

// Refuses an artifact built for another kind of target than `expected`
// (the one this runtime executes), then asks `supports`, when given, about
// the chip and features. Throws ArtifactError with the reason and `remedy`
// (what to do instead).
void checkTarget(const Artifact &artifact, artifact::TargetKind expected,
                 const TargetSupportCheck &supports = nullptr,
                 const std::string &remedy = "rebuild it for this machine's chip: kilnc --target");

// The target's features for which `has` returns false, in order: a helper
// for TargetSupportCheck implementations.
std::vector<std::string> missingFeatures(const artifact::Target &target,
                                         const std::function<bool(std::string_view)> &has);

} // namespace kiln
