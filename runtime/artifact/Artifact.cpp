#include "runtime/artifact/Artifact.h"

#include "runtime/artifact/ArtifactDigest.h"

#include "runtime/core/InputFile.h"

#include "runtime/core/Chip.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>

namespace kiln {
namespace fb = kiln::artifact;

// The schema's DType and kiln::DType must stay in step (the schema says so).
static_assert(static_cast<int>(fb::DType::BOOL) == static_cast<int>(DType::BOOL));
static_assert(static_cast<int>(fb::DType::BF16) == static_cast<int>(DType::BF16));
static_assert(static_cast<int>(fb::DType::F32) == static_cast<int>(DType::F32));
static_assert(static_cast<int>(fb::DType::F8_E5M2) == static_cast<int>(DType::F8_E5M2));
static_assert(static_cast<int>(fb::DType::MAX) == static_cast<int>(DType::F8_E5M2));

namespace {

// The root offset and the file identifier.
constexpr size_t kMinSize = 2 * sizeof(flatbuffers::uoffset_t);
// Flatbuffers address at most 2 GiB - 1 bytes.
constexpr uint64_t kMaxSize = FLATBUFFERS_MAX_BUFFER_SIZE;
// GPU launches: threads per block, and blocks along x (CUDA's limits; the
// runtime checks its device's).
constexpr uint32_t kMaxBlock = 1024;
constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;
// Tensor maps (cuTensorMapEncodeTiled): ranks 1..5, box sides 1..256, the
// box's rows a multiple of 16 bytes.
constexpr size_t kMaxTensorMapRank = 5;
constexpr uint32_t kMaxBoxSide = 256;
constexpr uint64_t kTensorMapRowAlign = 16;

// AMDGPU code objects (hsaco): the ELF64 header fields the loader reads
// (llvm/BinaryFormat/ELF.h) and the processors of the amdgcn chips this
// runtime runs.
constexpr size_t kElf64HeaderBytes = 64;
constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
constexpr uint8_t kElfClass64 = 2;          // ELFCLASS64
constexpr uint8_t kElfDataLittle = 1;       // ELFDATA2LSB
constexpr uint8_t kElfOsAbiAmdgpuHsa = 64;  // ELFOSABI_AMDGPU_HSA
constexpr uint64_t kElfTypeShared = 3;      // ET_DYN
constexpr uint64_t kElfMachineAmdgpu = 224; // EM_AMDGPU
constexpr uint32_t kEfAmdgpuMach = 0xff;    // EF_AMDGPU_MACH

// Chips this runtime does not run, so that a wrong object is named; the
// ones it runs are the chip table's (runtime/core/Chips.def).
struct OtherMach {
  const char *chip;
  uint32_t mach; // EF_AMDGPU_MACH_AMDGCN_<CHIP>
};
constexpr OtherMach kOtherMachs[] = {
    {"gfx908", 0x30}, {"gfx90a", 0x3f}, {"gfx1030", 0x36}, {"gfx9-4-generic", 0x5f}};

// The chip table's row of an amdgcn chip, or null.
const Chip *findMach(std::string_view chip) {
  const Chip *known = findChip(chip);
  return known && known->kind == ChipKind::Amdgcn ? known : nullptr;
}

std::string hex(uint32_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), kDigits[value & 15]);
    value >>= 4;
  } while (value);
  if (text.size() < 2)
    text.insert(text.begin(), '0');
  return "0x" + text;
}

// "gfx942 (EF_AMDGPU_MACH 0x4c)", or "EF_AMDGPU_MACH 0x2a" when not known.
std::string machText(uint32_t mach) {
  for (const Chip &known : allChips())
    if (known.kind == ChipKind::Amdgcn && known.elfMach == mach)
      return std::string(known.chip) + " (EF_AMDGPU_MACH " + hex(mach) + ")";
  for (const OtherMach &other : kOtherMachs)
    if (other.mach == mach)
      return std::string(other.chip) + " (EF_AMDGPU_MACH " + hex(mach) + ")";
  return "EF_AMDGPU_MACH " + hex(mach);
}

[[noreturn]] void fail(const std::string &source, const std::string &reason) {
  throw ArtifactError(source + ": " + reason);
}

std::string errnoText() { return std::strerror(errno); }

template <typename Enum> bool validEnum(Enum value) {
  return static_cast<uint64_t>(value) <= static_cast<uint64_t>(Enum::MAX);
}

// Artifact strings as they go into one-line messages: control bytes, quotes
// and backslashes escaped as \xNN.
std::string escaped(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string result;
  for (const char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte < 0x20 || byte == 0x7f || c == '\'' || c == '\\') {
      result += "\\x";
      result += kHex[byte >> 4];
      result += kHex[byte & 15];
    } else {
      result += c;
    }
  }
  return result;
}

// `'text'`, or `(none)` for a missing string.
std::string quoted(const flatbuffers::String *text) {
  return text ? "'" + escaped(text->string_view()) + "'" : std::string("(none)");
}

std::string str(const flatbuffers::String *text) { return text ? text->str() : std::string(); }

bool empty(const flatbuffers::String *text) { return !text || text->size() == 0; }

template <typename T> size_t sizeOf(const flatbuffers::Vector<T> *vector) {
  return vector ? vector->size() : 0;
}

std::string identifierText(const uint8_t *bytes) {
  return escaped(
      std::string_view(reinterpret_cast<const char *>(bytes), flatbuffers::kFileIdentifierLength));
}

bool tryEvaluate(const fb::Dim &dim, int64_t tokens, int64_t &result) {
  const int64_t align = dim.align();
  int64_t scaled, sum;
  if (dim.constant() < 0 || dim.per_token() < 0 || align < 1 || tokens < 0 ||
      __builtin_mul_overflow(dim.per_token(), tokens, &scaled) ||
      __builtin_add_overflow(dim.constant(), scaled, &sum))
    return false;
  if (const int64_t rest = sum % align;
      rest != 0 && __builtin_add_overflow(sum, align - rest, &sum))
    return false;
  result = sum;
  return true;
}

// Bytes of `ref` at `tokens`; false when a Dim is invalid or a product
// overflows. The dtype must be valid.
bool tryBufferBytes(const fb::BufferRef &ref, int64_t tokens, int64_t &result) {
  int64_t bytes = dtypeSize(toDType(ref.dtype()));
  if (const auto *shape = ref.shape()) {
    for (const fb::Dim *dim : *shape) {
      int64_t size;
      if (!tryEvaluate(*dim, tokens, size) || __builtin_mul_overflow(bytes, size, &bytes))
        return false;
    }
  }
  result = bytes;
  return true;
}

std::string dimText(const fb::Dim &dim) {
  return "{constant " + std::to_string(dim.constant()) + ", per_token " +
         std::to_string(dim.per_token()) + ", align " + std::to_string(dim.align()) + "}";
}

// The verifier checks that a vector's length field is aligned, not that its
// elements are aligned for their type (8 bytes for Dim and int64).
template <typename T> bool aligned(const flatbuffers::Vector<T> *vector) {
  using Element = std::remove_pointer_t<T>;
  return !vector || vector->size() == 0 ||
         reinterpret_cast<uintptr_t>(vector->Data()) % alignof(Element) == 0;
}

bool validKernelName(const flatbuffers::String *name) {
  if (empty(name))
    return false;
  return std::all_of(name->begin(), name->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// The rules of docs/runtime-abi.md beyond what the flatbuffers verifier
// checks, on a buffer that verified. Each failure names the field.
class Checker {
public:
  Checker(const fb::Artifact &root, const std::string &source) : root_(root), source_(source) {}

  // Verifies the artifact and returns what its config says of the model,
  // which the entry points' logits are checked against.
  ModelFacts run() {
    checkVersion(root_.version(), source_);
    requireTables();
    checkTarget();
    checkLayout();
    checkCommGroups();
    checkWeights();
    checkKvCaches();
    checkKernels();
    readFacts();
    checkEntryPoints();
    return facts_;
  }

  // Also used before the full verification, so that an artifact of another
  // major version is reported as such even when its layout has changed.
  static void checkVersion(const fb::Version *version, const std::string &source) {
    if (!version || version->schema_major() == fb::kSchemaMajor)
      return;
    std::string written = version->compiler()
                              ? " (written by " + escaped(version->compiler()->str()) + ")"
                              : std::string();
    kiln::fail(source, "version.schema_major: the artifact has schema version " +
                           std::to_string(version->schema_major()) + "." +
                           std::to_string(version->schema_minor()) + written +
                           "; this runtime reads schema version " +
                           std::to_string(fb::kSchemaMajor) + ".x: recompile it with this kilnc");
  }

private:
  [[noreturn]] void fail(const std::string &reason) const { kiln::fail(source_, reason); }

  // The config every tool reads the model's sizes from.
  void readFacts() {
    const auto *config = root_.model()->config_json();
    try {
      facts_ =
          readModelFacts(config ? config->str() : std::string(), source_ + ": model.config_json");
    } catch (const std::runtime_error &error) {
      throw ArtifactError(error.what());
    }
  }

  void requireTables() const {
    const std::pair<const void *, const char *> required[] = {
        {root_.version(), "version"}, {root_.target(), "target"},
        {root_.model(), "model"},     {root_.layout(), "layout"},
        {root_.library(), "library"}, {root_.entry_points(), "entry_points"},
    };
    for (const auto &[table, name] : required)
      if (!table)
        fail(std::string("missing required table '") + name + "'");
    if (root_.entry_points()->size() == 0)
      fail("entry_points: the artifact has no entry points");
  }

  void checkTarget() const {
    const fb::Target &target = *root_.target();
    if (!validEnum(target.kind()))
      fail("target.kind: unknown target kind " + std::to_string(static_cast<int>(target.kind())));
    const fb::KernelLibrary &library = *root_.library();
    const std::string_view expected = libraryFormatFor(target.kind());
    if (str(library.format()) != expected)
      fail("library.format " + quoted(library.format()) + " is not the " +
           std::string(targetKindName(target.kind())) + " kernel format (expected '" +
           std::string(expected) + "')");
    if (sizeOf(root_.kernels()) != 0 && sizeOf(library.blob()) == 0)
      fail("library.blob: empty, but the artifact has " + std::to_string(sizeOf(root_.kernels())) +
           " kernels");
    if (target.kind() == fb::TargetKind::NVPTX && sizeOf(library.blob()) != 0)
      checkPtxText(*library.blob());
    if (target.kind() == fb::TargetKind::AMDGCN && sizeOf(library.blob()) != 0)
      checkHsaco(*library.blob());
  }

  // An hsaco is an AMDGPU code object as hipModuleLoadData takes it: an
  // ELF64 little-endian shared object for the HSA ABI (what ld.lld -shared
  // makes of llc's amdgcn-amd-amdhsa output), e_machine EM_AMDGPU, and the
  // processor in e_flags (EF_AMDGPU_MACH) that of target.chip. Only the
  // 64-byte header is read here; HIP checks the rest when it loads it.
  void checkHsaco(const flatbuffers::Vector<uint8_t> &blob) const {
    const std::string chip = str(root_.target()->chip());
    const std::string but =
        "artifact is for " + describeTarget(*root_.target()) + ", but library.blob ";
    const uint8_t *bytes = blob.data();
    const size_t size = blob.size();
    auto number = [](uint64_t value) { return std::to_string(value); };
    if (size < 4 || std::memcmp(bytes, kElfMagic, 4) != 0) {
      std::string start;
      for (size_t i = 0; i < std::min<size_t>(size, 4); ++i)
        start += (i ? " " : "") + hex(bytes[i]);
      fail(but + "is not an ELF file (it starts with " + start +
           ", not the magic 0x7f 'E' 'L' 'F'): an amdgcn library is an "
           "hsaco code object");
    }
    if (size < kElf64HeaderBytes)
      fail(but + "is " + number(size) + " bytes, shorter than an ELF64 header (" +
           number(kElf64HeaderBytes) + ")");
    if (bytes[4] != kElfClass64)
      fail(but + "is not ELF64 (EI_CLASS " + number(bytes[4]) + ", expected 2)");
    if (bytes[5] != kElfDataLittle)
      fail(but + "is not little-endian ELF (EI_DATA " + number(bytes[5]) + ", expected 1)");
    auto read = [&](size_t offset, size_t width) {
      uint64_t value = 0;
      for (size_t i = width; i-- > 0;)
        value = value << 8 | bytes[offset + i];
      return value;
    };
    const uint64_t machine = read(18, 2);
    if (machine != kElfMachineAmdgpu)
      fail(but + "is not AMDGPU code (e_machine " + number(machine) + ", expected EM_AMDGPU 224)");
    if (bytes[7] != kElfOsAbiAmdgpuHsa)
      fail(but + "is not an HSA code object (EI_OSABI " + number(bytes[7]) +
           ", expected ELFOSABI_AMDGPU_HSA 64)");
    const uint64_t type = read(16, 2);
    if (type != kElfTypeShared)
      fail(but + "is not a linked code object (e_type " + number(type) +
           ", expected ET_DYN 3: link llc's object with ld.lld -shared)");
    const uint32_t mach = static_cast<uint32_t>(read(48, 4)) & kEfAmdgpuMach;
    const Chip *expected = findMach(chip);
    if (!expected)
      fail("artifact is for " + describeTarget(*root_.target()) +
           ", but this runtime does not know the amdgcn chip " + quoted(root_.target()->chip()) +
           " (it runs " + chipNames(ChipKind::Amdgcn) + ")");
    if (mach != expected->elfMach)
      fail(but + "is code for " + machText(mach) + ", not for " + escaped(chip) +
           " (EF_AMDGPU_MACH " + hex(expected->elfMach) + ")");
  }

  // PTX is text the driver reads up to its NUL: the blob must end with one
  // (padding NULs may follow it) and hold no text after it.
  void checkPtxText(const flatbuffers::Vector<uint8_t> &blob) const {
    const std::string but = "artifact is for " + describeTarget(*root_.target()) + ", but ";
    const size_t size = blob.size();
    const size_t end =
        static_cast<size_t>(std::find(blob.begin(), blob.end(), uint8_t{0}) - blob.begin());
    if (end == size)
      fail(but + "library.blob is not NUL-terminated PTX text (" + std::to_string(size) +
           " bytes, the last not NUL)");
    if (end == 0)
      fail(but + "library.blob is empty PTX text (it starts with NUL)");
    for (size_t i = end; i < size; ++i)
      if (blob.Get(static_cast<flatbuffers::uoffset_t>(i)) != 0)
        fail(but +
             "library.blob has bytes after the NUL that ends its PTX "
             "text (at byte " +
             std::to_string(end) + " of " + std::to_string(size) + ")");
  }

  // Launch.grid and Launch.block (schema 1.1): the launch shape of GPU
  // targets. Where they are given they must make sense; x86 launches leave
  // them unset. (That an nvptx launch has them is the GPU runtime's check.)
  void checkLaunchShape(const fb::EntryPoint &entry, const fb::Launch &launch,
                        const std::string &where) const {
    if (root_.target()->kind() == fb::TargetKind::X86) {
      if (launch.grid() || launch.block() != 0)
        fail(where + ": grid and block are for GPU targets; x86 launches "
                     "leave them unset");
      return;
    }
    if (launch.block() > kMaxBlock)
      fail(where + ".block: " + std::to_string(launch.block()) + " threads per block (at most " +
           std::to_string(kMaxBlock) + ")");
    if (const fb::Dim *grid = launch.grid()) {
      int64_t blocks;
      if (grid->constant() < 0 || grid->per_token() < 0 || grid->align() < 1)
        fail(where + ".grid " + dimText(*grid) + ": parts must be >= 0 and align >= 1");
      if (!tryEvaluate(*grid, entry.max_tokens(), blocks) || blocks > kMaxGrid)
        fail(where + ".grid " + dimText(*grid) + ": more than " + std::to_string(kMaxGrid) +
             " blocks at T=" + std::to_string(entry.max_tokens()));
    }
  }

  void checkLayout() const {
    const fb::Layout &layout = *root_.layout();
    const std::string text = "tp " + std::to_string(layout.tp()) + ", ep " +
                             std::to_string(layout.ep()) + ", world " +
                             std::to_string(layout.world());
    if (layout.tp() < 1 || layout.ep() < 1)
      fail("layout: tp and ep must be >= 1 (" + text + ")");
    if (layout.world() != std::max(layout.tp(), layout.ep()))
      fail("layout.world must be max(tp, ep) (" + text + ")");
    if (root_.rank() < 0 || root_.rank() >= layout.world())
      fail("rank " + std::to_string(root_.rank()) + " is not below layout.world " +
           std::to_string(layout.world()));
  }

  // Each group is a partition of the world: every rank once, groups of
  // `size` one after another.
  void checkCommGroups() const {
    const auto *groups = root_.comm_groups();
    const int32_t world = root_.layout()->world();
    for (size_t g = 0; g < sizeOf(groups); ++g) {
      const fb::CommGroup &group = *groups->Get(static_cast<flatbuffers::uoffset_t>(g));
      const std::string where = "comm_groups[" + std::to_string(g) + "]";
      if (group.size() < 1 || world % static_cast<int32_t>(group.size()) != 0)
        fail(where + ".size " + std::to_string(group.size()) + " does not divide layout.world " +
             std::to_string(world));
      if (sizeOf(group.ranks()) != static_cast<size_t>(world))
        fail(where + ".ranks: " + std::to_string(sizeOf(group.ranks())) +
             " ranks, expected every rank of layout.world " + std::to_string(world));
      std::set<int32_t> seen;
      for (int32_t rank : *group.ranks())
        if (rank < 0 || rank >= world || !seen.insert(rank).second)
          fail(where + ".ranks: rank " + std::to_string(rank) +
               " is out of range or repeated (layout.world " + std::to_string(world) + ")");
    }
  }

  // The size of comm_groups[index], or a failure naming `where`.
  int64_t commGroupSize(int64_t index, const std::string &where) const {
    const auto *groups = root_.comm_groups();
    if (index < 0 || static_cast<size_t>(index) >= sizeOf(groups))
      fail(where + ": comm group " + std::to_string(index) + " does not exist (the artifact has " +
           std::to_string(sizeOf(groups)) +
           "; multi-rank artifacts need schema 1.3: rebuild "
           "with this kilnc)");
    return groups->Get(static_cast<flatbuffers::uoffset_t>(index))->size();
  }

  void checkWeights() const {
    const auto *weights = root_.weights();
    for (size_t i = 0; i < sizeOf(weights); ++i)
      checkWeight(*weights->Get(static_cast<flatbuffers::uoffset_t>(i)),
                  "weights[" + std::to_string(i) + "]");
  }

  void checkWeight(const fb::WeightBinding &weight, std::string where) const {
    if (empty(weight.name()))
      fail(where + ".name: empty");
    where += " " + quoted(weight.name());
    if (!validEnum(weight.dtype()))
      fail(where + ".dtype: unknown dtype " + std::to_string(static_cast<int>(weight.dtype())));
    if (!validEnum(weight.transform()))
      fail(where + ".transform: unknown transform " +
           std::to_string(static_cast<int>(weight.transform())));
    const bool isStack = weight.name()->str().find("{e}") != std::string::npos;
    if (isStack != (weight.stack() > 0))
      fail(where +
           ": an expert stack needs both '{e}' in the name and "
           "stack >= 1 (stack " +
           std::to_string(weight.stack()) + ")");

    if (!aligned(weight.shape()))
      fail(where + ".shape: corrupt (misaligned)");
    std::vector<int64_t> shape;
    if (const auto *dims = weight.shape())
      shape.assign(dims->begin(), dims->end());
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t bytes = dtypeSize(toDType(weight.dtype()));
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] < 0)
        fail(where + ".shape[" + std::to_string(d) + "]: negative (" + std::to_string(shape[d]) +
             ")");
      if (__builtin_mul_overflow(bytes, shape[d], &bytes))
        fail(where + ".shape: too large");
    }
    if (__builtin_mul_overflow(bytes, std::max<int64_t>(weight.stack(), 1), &bytes))
      fail(where + ".shape: too large");

    // The TP slice: piece i of slice_count along slice_dim, i the rank's
    // index in comm_groups[slice_group].
    if (weight.slice_group() != -1) {
      const int64_t size = commGroupSize(weight.slice_group(), where + ".slice_group");
      if (weight.slice_dim() != -1 && weight.slice_count() != size)
        fail(where + ".slice_count " + std::to_string(weight.slice_count()) +
             " differs from the size of its slice_group (" + std::to_string(size) + ")");
      if (weight.slice_dim() == -1 && weight.stack() == 0)
        fail(where + ".slice_group: only expert stacks are split without a slice_dim");
    }
    std::vector<int64_t> piece = shape;
    if (weight.slice_dim() == -1) {
      if (weight.slice_count() != 1)
        fail(where + ".slice_count: " + std::to_string(weight.slice_count()) +
             " without a slice_dim");
    } else {
      if (weight.slice_dim() < 0 || weight.slice_dim() >= rank)
        fail(where + ".slice_dim " + std::to_string(weight.slice_dim()) +
             " is not a dimension of its rank-" + std::to_string(rank) + " shape");
      const int64_t size = shape[weight.slice_dim()];
      if (weight.slice_count() < 1 || size % weight.slice_count() != 0)
        fail(where + ".slice_count " + std::to_string(weight.slice_count()) +
             " does not divide dimension " + std::to_string(weight.slice_dim()) + " (" +
             std::to_string(size) + ")");
      piece[weight.slice_dim()] = size / weight.slice_count();
      bytes /= weight.slice_count();
    }

    if (weight.transform() == fb::WeightTransform::VnniBf16) {
      if (weight.dtype() != fb::DType::BF16 || rank != 2)
        fail(where +
             ".transform: VnniBf16 needs a rank-2 BF16 tensor "
             "(it is rank " +
             std::to_string(rank) + " " + std::string(dtypeName(toDType(weight.dtype()))) + ")");
      if (piece[0] % 16 != 0 || piece[1] % 32 != 0)
        fail(where +
             ".transform: VnniBf16 needs N % 16 == 0 and "
             "K % 32 == 0 (the [N, K] piece is [" +
             std::to_string(piece[0]) + ", " + std::to_string(piece[1]) + "])");
    }

    // The transforms keep the byte count; the runtime allocates `bytes` and
    // fills it from the checkpoint, so the two must agree.
    if (weight.bytes() != static_cast<uint64_t>(bytes))
      fail(where + ".bytes " + std::to_string(weight.bytes()) +
           " does not match its shape, dtype, stack and slice (" + std::to_string(bytes) +
           " bytes)");
  }

  // max_tokens of the "verify" entry point, 0 without one.
  uint64_t verifyTokens() const {
    for (const fb::EntryPoint *entry : *root_.entry_points())
      if (entry->name() && entry->name()->str() == "verify")
        return entry->max_tokens();
    return 0;
  }

  void checkKvCaches() const {
    const auto *caches = root_.kv_caches();
    for (size_t i = 0; i < sizeOf(caches); ++i) {
      const fb::KvCache &cache = *caches->Get(static_cast<flatbuffers::uoffset_t>(i));
      const std::string where = "kv_caches[" + std::to_string(i) + "]";
      if (!validEnum(cache.dtype()))
        fail(where + ".dtype: unknown dtype " + std::to_string(static_cast<int>(cache.dtype())));
      if (cache.kv_heads() < 1 || cache.head_dim() < 1)
        fail(where + ": kv_heads and head_dim must be >= 1 (kv_heads " +
             std::to_string(cache.kv_heads()) + ", head_dim " + std::to_string(cache.head_dim()) +
             ")");
      // A ring holds at least the window, and no more than it plus the
      // rollback of the longest verify call.
      if (cache.ring() != 0 &&
          (cache.window() == 0 || cache.ring() < cache.window() ||
           uint64_t{cache.ring()} - cache.window() + 1 > std::max<uint64_t>(1, verifyTokens())))
        fail(where + ".ring: " + std::to_string(cache.ring()) + " slots for window " +
             std::to_string(cache.window()) + " (expected 0 for a global layer, else the window " +
             "plus at most the verify entry's tokens - 1, " +
             std::to_string(std::max<uint64_t>(1, verifyTokens()) - 1) + ")");
      // Pages: global caches only, a power of two, the same for all.
      const uint32_t page = cache.page_tokens();
      if (page != 0 && (cache.window() != 0 || page < 16 || page > 4096 || (page & (page - 1))))
        fail(where + ".page_tokens: " + std::to_string(page) +
             " (expected 0, or for a global layer a power of two from 16 to 4096)");
      if (cache.window() == 0 && page != pageTokens())
        fail(where + ".page_tokens: " + std::to_string(page) + ", but an earlier global cache " +
             "has pages of " + std::to_string(pageTokens()) + " (one page table serves them all)");
    }
  }

  // The page of the artifact's paged caches (0: none is paged).
  uint32_t pageTokens() const {
    const auto *caches = root_.kv_caches();
    for (size_t i = 0; i < sizeOf(caches); ++i)
      if (const fb::KvCache &cache = *caches->Get(static_cast<flatbuffers::uoffset_t>(i));
          cache.window() == 0)
        return cache.page_tokens();
    return 0;
  }

  void checkKernels() const {
    const auto *kernels = root_.kernels();
    std::set<std::string> names;
    for (size_t i = 0; i < sizeOf(kernels); ++i) {
      const fb::Kernel &kernel = *kernels->Get(static_cast<flatbuffers::uoffset_t>(i));
      const std::string where = "kernels[" + std::to_string(i) + "].name";
      if (empty(kernel.name()))
        fail(where + ": empty");
      if (!validKernelName(kernel.name()))
        fail(where + " " + quoted(kernel.name()) + ": not a symbol name ([A-Za-z0-9_]+)");
      if (!names.insert(kernel.name()->str()).second)
        fail(where + " " + quoted(kernel.name()) + ": duplicated");
      checkSharedBytes(kernel, "kernels[" + std::to_string(i) + "] " + quoted(kernel.name()) +
                                   ".shared_bytes");
    }
  }

  // Kernel.shared_bytes (schema 1.5): dynamic shared memory, for nvptx
  // kernels only, within what a block of the artifact's chip can have (the
  // chip table's; a chip not in it, the most of any nvptx chip there).
  void checkSharedBytes(const fb::Kernel &kernel, const std::string &where) const {
    const uint32_t bytes = kernel.shared_bytes();
    if (bytes == 0)
      return;
    if (root_.target()->kind() != fb::TargetKind::NVPTX)
      fail(where + " " + std::to_string(bytes) +
           ": dynamic shared memory is for nvptx kernels (the artifact is for " +
           describeTarget(*root_.target()) + ")");
    const Chip *row = findChipOrTarget(str(root_.target()->chip()));
    int64_t limit = 0;
    if (row) {
      limit = row->sharedBytes();
    } else {
      for (const Chip &any : allChips())
        if (any.kind == ChipKind::Nvptx)
          limit = std::max(limit, any.sharedBytes());
    }
    if (bytes > limit)
      fail(where + " " + std::to_string(bytes) + ": more than the " + std::to_string(limit) +
           " bytes (" + std::to_string(limit / 1024) +
           " KiB) of dynamic shared memory a block can have on " +
           (row ? std::string(row->chip) : "any nvptx chip Kiln knows"));
  }

  void checkEntryPoints() const {
    const auto &entryPoints = *root_.entry_points();
    std::set<std::string> names;
    for (flatbuffers::uoffset_t i = 0; i < entryPoints.size(); ++i) {
      const fb::EntryPoint &entry = *entryPoints.Get(i);
      std::string where = "entry_points[" + std::to_string(i) + "]";
      if (empty(entry.name()))
        fail(where + ".name: empty");
      where += " " + quoted(entry.name());
      if (!names.insert(entry.name()->str()).second)
        fail(where + ".name: duplicated");
      if (entry.max_tokens() < 1)
        fail(where + ".max_tokens: must be >= 1");
      if (entry.token_split() > 1 &&
          (entry.sequences() != 0 ||
           static_cast<int32_t>(entry.token_split()) > root_.layout()->world()))
        fail(where + ".token_split " + std::to_string(entry.token_split()) +
             ": splits one conversation's tokens over at most layout.world ranks (" +
             std::to_string(root_.layout()->world()) + "), never a batched entry's");
      if (const fb::Dim *rows = entry.logits_rows()) {
        int64_t value;
        if (!tryEvaluate(*rows, entry.max_tokens(), value))
          fail(where + ".logits_rows " + dimText(*rows) +
               ": invalid (negative, align < 1 or too large)");
      }
      checkEntryShape(entry, where);
      const auto *steps = entry.steps();
      for (flatbuffers::uoffset_t s = 0; s < sizeOf(steps); ++s)
        checkStep(entry, *steps->Get(s), where + ": steps[" + std::to_string(s) + "]");
    }
    if (!names.count("prefill") && !names.count("decode"))
      fail("entry_points: no entry point 'prefill' or 'decode'");
  }

  // What the runtime's calls rely on: a batched entry's tokens are its
  // conversations' rows; logits are the last token's or every token's (all
  // of them for a batched or verify entry); a prefill or a decode entry.
  void checkEntryShape(const fb::EntryPoint &entry, const std::string &where) const {
    const int64_t maxTokens = entry.max_tokens();
    const int64_t sequences = entry.sequences();
    const int64_t rows = std::max<int64_t>(1, entry.sequence_rows());
    if (sequences && (sequences < 2 || sequences * rows != maxTokens))
      fail(where + ": sequences " + std::to_string(sequences) +
           " must be at least 2 and, times sequence_rows " + std::to_string(rows) +
           ", equal max_tokens (" + std::to_string(maxTokens) + ")");
    const fb::Dim lastToken{1, 0, 1};
    const fb::Dim &logitsRows = entry.logits_rows() ? *entry.logits_rows() : lastToken;
    const int64_t rowsAtOne = evaluate(logitsRows, 1);
    const int64_t rowsAtMax = evaluate(logitsRows, maxTokens);
    if (sequences && rowsAtMax != maxTokens)
      fail(where + ": a batched entry writes every token's logits");
    if (rowsAtOne < 1 || (rowsAtMax != 1 && rowsAtMax < maxTokens))
      fail(where + ": logits_rows must be 1 (last token) or at least T");
    if (entry.name()->str() == "verify" && rowsAtMax == 1 && maxTokens > 1)
      fail(where + ": a verify entry must write every token's logits");
  }

  void checkStep(const fb::EntryPoint &entry, const fb::StepEntry &step, std::string where) const {
    switch (step.step_type()) {
    case fb::Step::Launch:
      if (const fb::Launch *launch = step.step_as_Launch())
        return checkLaunch(entry, *launch, where);
      break;
    case fb::Step::Copy:
      if (const fb::Copy *copy = step.step_as_Copy())
        return checkCopy(entry, *copy, where + " (copy)");
      break;
    case fb::Step::Collective:
      if (const fb::Collective *collective = step.step_as_Collective())
        return checkCollective(entry, *collective, where + " (collective)");
      break;
    case fb::Step::NONE:
      fail(where + ".step: missing");
    default:
      fail(where + ".step_type: unknown step kind " +
           std::to_string(static_cast<int>(step.step_type())));
    }
    fail(where + ".step: missing");
  }

  void checkLaunch(const fb::EntryPoint &entry, const fb::Launch &launch, std::string where) const {
    const size_t numKernels = sizeOf(root_.kernels());
    if (launch.kernel() >= numKernels)
      fail(where + " (launch, op " + quoted(launch.op()) + ").kernel " +
           std::to_string(launch.kernel()) +
           ": out of range (the artifact "
           "has " +
           std::to_string(numKernels) + " kernels)");
    where += " (launch of " + quoted(root_.kernels()->Get(launch.kernel())->name()) + ", op " +
             quoted(launch.op()) + ")";
    if (launch.max_parts() < 1)
      fail(where + ".max_parts: must be >= 1");
    checkLaunchShape(entry, launch, where);
    const auto *buffers = launch.buffers();
    for (flatbuffers::uoffset_t b = 0; b < sizeOf(buffers); ++b)
      checkBuffer(entry, *buffers->Get(b), where + ": buffers[" + std::to_string(b) + "]");
    checkArenaOverlaps(entry, launch, where);
    const auto *scalars = launch.scalars();
    for (flatbuffers::uoffset_t s = 0; s < sizeOf(scalars); ++s) {
      if (!validEnum(scalars->Get(s)->kind()))
        fail(where + ": scalars[" + std::to_string(s) + "].kind: unknown scalar kind " +
             std::to_string(static_cast<int>(scalars->Get(s)->kind())));
      if (scalars->Get(s)->kind() == fb::ScalarKind::GroupIndex)
        commGroupSize(scalars->Get(s)->value(), where + ": scalars[" + std::to_string(s) + "]");
      if (scalars->Get(s)->kind() == fb::ScalarKind::TensorMap)
        checkTensorMapScalar(launch, *scalars->Get(s),
                             where + ": scalars[" + std::to_string(s) + "]");
    }
    checkTensorMaps(launch, where);
  }

  // The arena buffers of one launch are the same bytes (an operand read and
  // written in place) or disjoint: a partial overlap would let a kernel's
  // writes land in another operand while it reads it. Sizes at max_tokens,
  // the largest any call has (checkBuffer has bounded them).
  void checkArenaOverlaps(const fb::EntryPoint &entry, const fb::Launch &launch,
                          const std::string &where) const {
    struct Range {
      flatbuffers::uoffset_t buffer;
      uint64_t begin, end;
    };
    std::vector<Range> ranges;
    const auto *buffers = launch.buffers();
    for (flatbuffers::uoffset_t b = 0; b < sizeOf(buffers); ++b) {
      const fb::BufferRef &ref = *buffers->Get(b);
      int64_t bytes = 0;
      if (ref.kind() != fb::BufferKind::Arena || !tryBufferBytes(ref, entry.max_tokens(), bytes) ||
          bytes == 0)
        continue;
      ranges.push_back({b, ref.offset(), ref.offset() + static_cast<uint64_t>(bytes)});
    }
    for (size_t i = 0; i < ranges.size(); ++i)
      for (size_t j = i + 1; j < ranges.size(); ++j) {
        const Range &a = ranges[i], &c = ranges[j];
        const bool same = a.begin == c.begin && a.end == c.end;
        if (!same && a.begin < c.end && c.begin < a.end)
          fail(where + ": buffers[" + std::to_string(a.buffer) + "] (arena bytes " +
               std::to_string(a.begin) + ".." + std::to_string(a.end) + ") and buffers[" +
               std::to_string(c.buffer) + "] (" + std::to_string(c.begin) + ".." +
               std::to_string(c.end) + ") overlap without being the same bytes");
      }
  }

  // Tensor maps are the CUDA driver's: nvptx artifacts only.
  void requireNvptx(const std::string &where, const char *what) const {
    if (root_.target()->kind() != fb::TargetKind::NVPTX)
      fail(where + ": " + what + " are for nvptx kernels (the artifact is for " +
           describeTarget(*root_.target()) + ")");
  }

  // A TensorMap scalar (schema 1.5) indexes its launch's tensor_maps.
  void checkTensorMapScalar(const fb::Launch &launch, const fb::Scalar &scalar,
                            const std::string &where) const {
    requireNvptx(where, "TensorMap scalars");
    const size_t count = sizeOf(launch.tensor_maps());
    if (scalar.value() < 0 || static_cast<uint64_t>(scalar.value()) >= count)
      fail(where + ".value " + std::to_string(scalar.value()) +
           ": no such tensor map (the launch has " + std::to_string(count) + " tensor_maps)");
  }

  // Launch.tensor_maps (schema 1.5): each over one of the launch's buffers,
  // within what cuTensorMapEncodeTiled takes and the kernels use.
  void checkTensorMaps(const fb::Launch &launch, const std::string &where) const {
    const auto *maps = launch.tensor_maps();
    if (sizeOf(maps) == 0)
      return;
    requireNvptx(where + ".tensor_maps", "tensor maps");
    const auto *buffers = launch.buffers();
    for (flatbuffers::uoffset_t m = 0; m < maps->size(); ++m) {
      const fb::TensorMap &map = *maps->Get(m);
      const std::string at = where + ": tensor_maps[" + std::to_string(m) + "]";
      if (map.buffer() >= sizeOf(buffers))
        fail(at + ".buffer " + std::to_string(map.buffer()) + ": out of range (the launch has " +
             std::to_string(sizeOf(buffers)) + " buffers)");
      const fb::BufferRef &ref = *buffers->Get(map.buffer());
      const std::string buffer = "buffers[" + std::to_string(map.buffer()) + "]";
      const DType dtype = toDType(ref.dtype());
      if (dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F32)
        fail(at + ": " + buffer + " is " + std::string(dtypeName(dtype)) +
             "; tensor maps take BF16, F16 or F32 buffers");
      const size_t rank = sizeOf(ref.shape());
      if (rank > kMaxTensorMapRank)
        fail(at + ": " + buffer + " has rank " + std::to_string(rank) +
             "; tensor maps take ranks 1.." + std::to_string(kMaxTensorMapRank));
      checkBox(map, rank, dtype, at);
    }
  }

  void checkBox(const fb::TensorMap &map, size_t rank, DType dtype, const std::string &at) const {
    const auto *box = map.box();
    if (sizeOf(box) != rank)
      fail(at + ".box: " + std::to_string(sizeOf(box)) + " entries for a rank-" +
           std::to_string(rank) + " buffer (one per dimension, innermost first)");
    for (flatbuffers::uoffset_t d = 0; d < box->size(); ++d)
      if (box->Get(d) < 1 || box->Get(d) > kMaxBoxSide)
        fail(at + ".box[" + std::to_string(d) + "] " + std::to_string(box->Get(d)) +
             ": must be 1.." + std::to_string(kMaxBoxSide) + " elements");
    const uint64_t row = uint64_t{box->Get(0)} * static_cast<uint64_t>(dtypeSize(dtype));
    const std::string rowText = "the box's rows are " + std::to_string(row) + " bytes (" +
                                std::to_string(box->Get(0)) + " " + std::string(dtypeName(dtype)) +
                                ")";
    if (row % kTensorMapRowAlign != 0)
      fail(at + ".box[0]: " + rowText + ", not a multiple of " +
           std::to_string(kTensorMapRowAlign));
    const uint8_t swizzle = map.swizzle();
    if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
      fail(at + ".swizzle " + std::to_string(swizzle) +
           ": must be 0 (none), 32, 64 or 128 (bytes)");
    if (swizzle != 0 && row > swizzle)
      fail(at + ".swizzle " + std::to_string(swizzle) + ": " + rowText +
           ", more than the swizzle span");
  }

  void checkCopy(const fb::EntryPoint &entry, const fb::Copy &copy,
                 const std::string &where) const {
    if (!copy.source() || !copy.destination())
      fail(where + ": missing " + (copy.source() ? "destination" : "source"));
    checkBuffer(entry, *copy.source(), where + ".source");
    checkBuffer(entry, *copy.destination(), where + ".destination");
    // Dims are monotone in T; the sizes are compared at both ends.
    for (int64_t tokens : {int64_t(1), int64_t(entry.max_tokens())}) {
      const int64_t from = bufferBytes(*copy.source(), tokens);
      const int64_t to = bufferBytes(*copy.destination(), tokens);
      if (from != to)
        fail(where + ": source and destination differ in size at T=" + std::to_string(tokens) +
             " (" + std::to_string(from) + " and " + std::to_string(to) + " bytes)");
    }
  }

  void checkCollective(const fb::EntryPoint &entry, const fb::Collective &collective,
                       const std::string &where) const {
    const int32_t world = root_.layout()->world();
    if (world < 2)
      fail(where + ": a collective in a single-rank artifact (layout.world 1)");
    if (!validEnum(collective.kind()))
      fail(where + ".kind: unknown collective kind " +
           std::to_string(static_cast<int>(collective.kind())));
    if (!collective.source() || !collective.destination())
      fail(where + ": missing " + (collective.source() ? "destination" : "source"));
    checkBuffer(entry, *collective.source(), where + ".source");
    checkBuffer(entry, *collective.destination(), where + ".destination");
    const int64_t ranks = commGroupSize(collective.comm_group(), where + ".comm_group");
    const size_t rank = sizeOf(collective.destination()->shape());
    if (collective.kind() != fb::CollectiveKind::AllReduce &&
        (collective.axis() < 0 || static_cast<size_t>(collective.axis()) >= rank))
      fail(where + ".axis " + std::to_string(collective.axis()) +
           " is not a dimension of the rank-" + std::to_string(rank) + " buffers");
    for (int64_t tokens : {int64_t(1), int64_t(entry.max_tokens())}) {
      const int64_t from = bufferBytes(*collective.source(), tokens);
      const int64_t to = bufferBytes(*collective.destination(), tokens);
      bool ok = true;
      switch (collective.kind()) {
      case fb::CollectiveKind::AllGather:
        ok = from <= to / ranks && from * ranks == to;
        break;
      case fb::CollectiveKind::ReduceScatter:
        ok = to <= from / ranks && to * ranks == from;
        break;
      default:
        ok = from == to;
        break;
      }
      if (!ok)
        fail(where + ": " + fb::EnumNameCollectiveKind(collective.kind()) + " over " +
             std::to_string(ranks) + " ranks cannot take " + std::to_string(from) + " bytes to " +
             std::to_string(to) + " bytes (at T=" + std::to_string(tokens) + ")");
    }
  }

  void checkBuffer(const fb::EntryPoint &entry, const fb::BufferRef &ref,
                   const std::string &where) const {
    if (!validEnum(ref.kind()))
      fail(where + ".kind: unknown buffer kind " + std::to_string(static_cast<int>(ref.kind())));
    if (!validEnum(ref.dtype()))
      fail(where + ".dtype: unknown dtype " + std::to_string(static_cast<int>(ref.dtype())));
    if (!aligned(ref.shape()))
      fail(where + ".shape: corrupt (misaligned)");
    const size_t rank = sizeOf(ref.shape());
    if (rank < 1)
      fail(where + ".shape: rank 0 (buffers have rank >= 1)");
    for (flatbuffers::uoffset_t d = 0; d < rank; ++d) {
      const fb::Dim &dim = *ref.shape()->Get(d);
      if (dim.constant() < 0 || dim.per_token() < 0 || dim.align() < 1)
        fail(where + ".shape[" + std::to_string(d) + "] " + dimText(dim) +
             ": parts must be >= 0 and align >= 1");
    }
    // Every size is monotone in T, so max_tokens bounds them all.
    const int64_t maxTokens = entry.max_tokens();
    int64_t bytes, end;
    if (!tryBufferBytes(ref, maxTokens, bytes) || ref.offset() > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_add_overflow(static_cast<int64_t>(ref.offset()), bytes, &end))
      fail(where + ": size overflows at T=" + std::to_string(maxTokens));
    const uint64_t extent = static_cast<uint64_t>(end);
    const std::string index = std::to_string(ref.index());
    const DType dtype = toDType(ref.dtype());

    switch (ref.kind()) {
    case fb::BufferKind::Arena:
      if (extent > entry.arena_bytes())
        fail(where + ": arena buffer at offset " + std::to_string(ref.offset()) + " of " +
             std::to_string(bytes) + " bytes at T=" + std::to_string(maxTokens) + " ends at " +
             std::to_string(extent) + ", past arena_bytes " + std::to_string(entry.arena_bytes()));
      if (ref.offset() % static_cast<uint64_t>(dtypeSize(dtype)) != 0)
        fail(where + ".offset " + std::to_string(ref.offset()) + ": not aligned to its " +
             std::string(dtypeName(dtype)) + " elements");
      break;
    case fb::BufferKind::Weight: {
      const size_t count = sizeOf(root_.weights());
      if (ref.index() >= count)
        fail(where + ".index: Weight index " + index + " out of range (the artifact has " +
             std::to_string(count) + " weights)");
      const fb::WeightBinding &weight = *root_.weights()->Get(ref.index());
      if (extent > weight.bytes())
        fail(where + ": reads bytes " + std::to_string(ref.offset()) + ".." +
             std::to_string(extent) + " of weights[" + index + "] " + quoted(weight.name()) +
             ", which has " + std::to_string(weight.bytes()) + " bytes");
      break;
    }
    case fb::BufferKind::KvCache: {
      const size_t count = sizeOf(root_.kv_caches());
      if (ref.index() >= 2 * count)
        fail(where + ".index: KvCache index " + index + " out of range (the artifact has " +
             std::to_string(count) + " KV caches, indices 0.." + std::to_string(2 * count) + ")");
      const fb::KvCache &cache = *root_.kv_caches()->Get(ref.index() / 2);
      int64_t heads = -1, headDim = -1;
      if (rank == 3) {
        tryEvaluate(*ref.shape()->Get(1), maxTokens, heads);
        tryEvaluate(*ref.shape()->Get(2), maxTokens, headDim);
      }
      if (rank != 3 || heads != cache.kv_heads() || headDim != cache.head_dim() ||
          ref.dtype() != cache.dtype())
        fail(where + ": KV cache " + std::to_string(ref.index() / 2) + " is [slots, " +
             std::to_string(cache.kv_heads()) + ", " + std::to_string(cache.head_dim()) + "] " +
             std::string(dtypeName(toDType(cache.dtype()))) +
             "; the buffer's rank, shape or dtype differs");
      break;
    }
    case fb::BufferKind::Input:
      if (ref.index() > 2 || (ref.index() == 2 && pageTokens() == 0))
        fail(where + ".index: Input index " + index +
             " out of range (0: token ids, 1: positions, 2: the page table where the KV caches "
             "are paged)");
      if (ref.dtype() != fb::DType::I32 || rank != 1)
        fail(where + ": inputs are rank-1 I32");
      break;
    case fb::BufferKind::Output:
      if (ref.index() >= 1)
        fail(where + ".index: Output index " + index + " out of range (0: logits)");
      if (ref.dtype() != fb::DType::F32 || rank != 2)
        fail(where + ": the logits output is rank-2 F32");
      // Rows of the config's vocabulary: the runtime sizes logits and token
      // choice by it.
      if (const int64_t width = evaluate(*ref.shape()->Get(1), maxTokens);
          width != facts_.vocabSize)
        fail(where + ": logits of width " + std::to_string(width) + ", but the vocabulary has " +
             std::to_string(facts_.vocabSize) + " tokens (model.config_json's vocab_size)");
      break;
    case fb::BufferKind::Exchange: {
      const size_t count = sizeOf(root_.comm_groups());
      if (ref.index() >= count)
        fail(where + ".index: Exchange names comm group " + index + ", but the artifact has " +
             std::to_string(count));
      const fb::CommGroup &group = *root_.comm_groups()->Get(ref.index());
      int64_t members = -1;
      if (rank == 1)
        tryEvaluate(*ref.shape()->Get(0), maxTokens, members);
      if (ref.dtype() != fb::DType::I64 || rank != 1 || members != group.size())
        fail(where + ": an exchange table is [" + std::to_string(group.size()) +
             "] I64, one address per member of comm group " + index);
      if (ref.offset() % 256 != 0 || ref.offset() >= group.exchange_bytes())
        fail(where + ".offset " + std::to_string(ref.offset()) +
             ": not a 256-byte aligned site "
             "within comm group " +
             index + "'s " + std::to_string(group.exchange_bytes()) + " exchange bytes");
      break;
    }
    }
  }

  const fb::Artifact &root_;
  const std::string &source_;
  ModelFacts facts_;
};

// Runs the table verifier on the root and its version only: enough to read
// the version of a buffer that may not verify as a whole under this schema.
const fb::Version *peekVersion(const uint8_t *data, size_t size) {
  flatbuffers::Verifier verifier(data, size);
  const flatbuffers::uoffset_t offset = verifier.VerifyOffset(0);
  if (offset == 0)
    return nullptr;
  const auto *table = reinterpret_cast<const flatbuffers::Table *>(data + offset);
  if (!table->VerifyTableStart(verifier) ||
      !table->VerifyOffset(verifier, fb::Artifact::VT_VERSION))
    return nullptr;
  const auto *version = table->GetPointer<const fb::Version *>(fb::Artifact::VT_VERSION);
  return version && version->Verify(verifier) ? version : nullptr;
}

} // namespace

Artifact::Artifact(std::vector<uint8_t> bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)) {
  const uint8_t *data = bytes_.data();
  const size_t size = bytes_.size();
  if (size < kMinSize)
    fail(source_, "too small to be a Kiln artifact (" + std::to_string(size) + " bytes)");
  if (size >= kMaxSize)
    fail(source_, "too large to be a Kiln artifact (" + std::to_string(size) +
                      " bytes; flatbuffers stop at 2 GiB)");
  if (!fb::ArtifactBufferHasIdentifier(data))
    fail(source_, "not a Kiln artifact (identifier '" +
                      identifierText(data + sizeof(flatbuffers::uoffset_t)) + "', expected '" +
                      fb::ArtifactIdentifier() + "')");

  Checker::checkVersion(peekVersion(data, size), source_);

  flatbuffers::Verifier::Options options;
  // Every table takes at least 4 bytes; the default cap (one million) would
  // refuse a large but valid artifact.
  options.max_tables =
      static_cast<flatbuffers::uoffset_t>(std::max<size_t>(options.max_tables, size / 4));
  flatbuffers::Verifier verifier(data, size, options);
  if (!fb::VerifyArtifactBuffer(verifier))
    fail(source_, "corrupt: the flatbuffer does not verify");
  // The verifier has walked everything the root reaches; kilnc writes
  // nothing else, so bytes past the furthest it reached were added since.
  const size_t used = verifier.GetComputedSize();
  if (used != size)
    fail(source_, "corrupt: " + std::to_string(size - used) +
                      (size - used == 1 ? " trailing byte" : " trailing bytes") +
                      " after the artifact's data, which ends at byte " + std::to_string(used));
  // Before anything in it is believed: every byte as kilnc wrote it.
  if (const std::string mismatch = artifact::digestMismatch(data, size); !mismatch.empty())
    fail(source_, mismatch);

  root_ = fb::GetArtifact(data);
  facts_ = Checker(*root_, source_).run();
}

Artifact Artifact::fromBytes(std::vector<uint8_t> bytes, std::string source) {
  return Artifact(std::move(bytes), std::move(source));
}

Artifact Artifact::load(const std::string &path) {
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of
  // waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    fail(path, openFailure(path, errno));
  std::vector<uint8_t> bytes;
  try {
    struct stat info;
    if (::fstat(fd, &info) != 0)
      fail(path, "cannot stat: " + errnoText());
    if (!S_ISREG(info.st_mode))
      fail(path, inputFileProblem(path));
    if (static_cast<uint64_t>(info.st_size) >= kMaxSize)
      fail(path, "too large to be a Kiln artifact (" + std::to_string(info.st_size) +
                     " bytes; flatbuffers stop at 2 GiB)");
    bytes.resize(static_cast<size_t>(info.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (got < 0 && errno == EINTR)
        continue;
      if (got < 0)
        fail(path, "cannot read: " + errnoText());
      if (got == 0)
        fail(path, "cannot read: the file shrank while being read");
      done += static_cast<size_t>(got);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return Artifact(std::move(bytes), path);
}

size_t Artifact::numWeights() const { return sizeOf(root_->weights()); }
size_t Artifact::numKvCaches() const { return sizeOf(root_->kv_caches()); }
size_t Artifact::numKernels() const { return sizeOf(root_->kernels()); }

const fb::EntryPoint *Artifact::findEntryPoint(std::string_view name) const {
  for (const fb::EntryPoint *entry : *root_->entry_points())
    if (entry->name()->string_view() == name)
      return entry;
  return nullptr;
}

std::optional<uint32_t> Artifact::findKernel(std::string_view name) const {
  if (const auto *kernels = root_->kernels())
    for (flatbuffers::uoffset_t i = 0; i < kernels->size(); ++i)
      if (kernels->Get(i)->name() && kernels->Get(i)->name()->string_view() == name)
        return i;
  return std::nullopt;
}

const fb::EntryPoint &Artifact::entryPoint(std::string_view name) const {
  if (const fb::EntryPoint *entry = findEntryPoint(name))
    return *entry;
  std::string names;
  for (const fb::EntryPoint *entry : *root_->entry_points())
    names += (names.empty() ? "" : ", ") + quoted(entry->name());
  fail(source_, "no entry point '" + escaped(name) + "' (it has " + names + ")");
}

DType toDType(fb::DType dtype) { return static_cast<DType>(dtype); }

int64_t evaluate(const fb::Dim &dim, int64_t tokens) {
  int64_t result;
  if (!tryEvaluate(dim, tokens, result))
    throw ArtifactError("Dim " + dimText(dim) + " at T=" + std::to_string(tokens) +
                        " is invalid or overflows");
  return result;
}

std::vector<int64_t> evaluateShape(const fb::BufferRef &ref, int64_t tokens) {
  std::vector<int64_t> shape;
  if (const auto *dims = ref.shape())
    for (const fb::Dim *dim : *dims)
      shape.push_back(evaluate(*dim, tokens));
  return shape;
}

int64_t bufferBytes(const fb::BufferRef &ref, int64_t tokens) {
  int64_t result;
  if (!validEnum(ref.dtype()) || !tryBufferBytes(ref, tokens, result))
    throw ArtifactError("buffer size at T=" + std::to_string(tokens) + " is invalid or overflows");
  return result;
}

std::string tilingField(const artifact::Kernel &kernel, std::string_view key) {
  if (!kernel.tiling())
    return {};
  const nlohmann::json tiling =
      nlohmann::json::parse(kernel.tiling()->str(), nullptr, /*allow_exceptions=*/false);
  if (!tiling.is_object())
    return {};
  auto it = tiling.find(key);
  return it != tiling.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string_view targetKindName(fb::TargetKind kind) {
  switch (kind) {
  case fb::TargetKind::X86:
    return "x86";
  case fb::TargetKind::NVPTX:
    return "nvptx";
  case fb::TargetKind::AMDGCN:
    return "amdgcn";
  }
  return "unknown";
}

std::string_view libraryFormatFor(fb::TargetKind kind) {
  switch (kind) {
  case fb::TargetKind::X86:
    return "elf-shared-object";
  case fb::TargetKind::NVPTX:
    return "ptx";
  case fb::TargetKind::AMDGCN:
    return "hsaco";
  }
  return "";
}

std::string describeTarget(const fb::Target &target) {
  std::string text(targetKindName(target.kind()));
  if (!empty(target.chip()))
    text += " " + escaped(target.chip()->string_view());
  // A GPU's few code features say what its chip name does not ("+xnack");
  // a CPU's instruction-set list is long, and its name says it.
  if (const auto *features = target.features();
      target.kind() != fb::TargetKind::X86 && sizeOf(features) != 0) {
    text += " (";
    for (flatbuffers::uoffset_t i = 0; i < features->size(); ++i)
      text += (i ? ", " : "") + escaped(features->Get(i)->string_view());
    text += ")";
  }
  return text;
}

void checkTarget(const Artifact &artifact, fb::TargetKind expected,
                 const TargetSupportCheck &supports, const std::string &remedy) {
  const fb::Target &target = *artifact->target();
  if (target.kind() != expected) {
    std::string text(targetKindName(target.kind()));
    if (!empty(target.chip()))
      text += " " + escaped(target.chip()->string_view());
    const std::string wanted(targetKindName(expected));
    fail(artifact.source(), "artifact is for " + text + "; this runtime runs " + wanted +
                                " artifacts: rebuild with kilnc "
                                "--target " +
                                wanted);
  }
  if (!supports)
    return;
  if (std::string reason = supports(target); !reason.empty())
    fail(artifact.source(), "artifact is for " + describeTarget(target) +
                                ", which this machine cannot run: " + reason + " (" + remedy + ")");
}

std::vector<std::string> missingFeatures(const fb::Target &target,
                                         const std::function<bool(std::string_view)> &has) {
  std::vector<std::string> missing;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features)
      if (!has(feature->string_view()))
        missing.push_back(feature->str());
  return missing;
}

} // namespace kiln
