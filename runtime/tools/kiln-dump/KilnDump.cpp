#include "runtime/tools/kiln-dump/KilnDump.h"
#include "runtime/core/QuoteName.h"

#include "runtime/artifact/ArtifactMemory.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <ostream>

namespace kiln {
namespace fb = kiln::artifact;
namespace {

constexpr const char *kUsage =
    "usage: kiln-dump [--weights] [--steps] FILE\n"
    "\n"
    "Prints a summary of a Kiln artifact (.kiln, written by kilnc): schema\n"
    "version, target, model, parallel layout and comm groups, weight\n"
    "bindings, KV caches, kernels (and their dynamic shared memory) and, per\n"
    "entry point, its token limit, arena, steps, launches by the graph op\n"
    "they implement (fused ops included), collectives by kind and launches\n"
    "that exchange through peer memory, and what one rank needs in memory.\n"
    "The artifact is verified first; a bad one is reported in one line.\n"
    "\n"
    "  --weights   list every weight binding\n"
    "  --steps     list every step: kernel, op, buffers (shapes at\n"
    "              T = max_tokens) and scalars (a tensor map's as\n"
    "              tmap(buffer N, box innermost first, swizzle))\n"
    "  --help      show this text\n"
    "\n"
    "exit status: 0 done, 1 the artifact cannot be read, 2 bad usage\n";

// Artifact strings may hold anything; control bytes are escaped so that each
// item stays on its line.
std::string text(const flatbuffers::String *value) {
  if (!value)
    return "(none)";
  std::string result;
  for (char c : value->string_view()) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      result += escaped;
    } else {
      result += c;
    }
  }
  return result;
}

std::string bytesText(uint64_t bytes) {
  std::string result = std::to_string(bytes) + " bytes";
  if (bytes < 1024)
    return result;
  static const char *const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char scaled[32];
  std::snprintf(scaled, sizeof(scaled), " (%.1f %s)", value, kUnits[unit]);
  return result + scaled;
}

std::string dtypeText(fb::DType dtype) { return std::string(dtypeName(toDType(dtype))); }

template <typename T> std::string listText(const std::vector<T> &values) {
  std::string result = "[";
  for (size_t i = 0; i < values.size(); ++i)
    result += (i ? ", " : "") + std::to_string(values[i]);
  return result + "]";
}

std::string bufferText(const Artifact &artifact, const fb::BufferRef &ref, int64_t tokens) {
  std::string name;
  const std::string index = std::to_string(ref.index());
  switch (ref.kind()) {
  case fb::BufferKind::Arena:
    name = "arena";
    break;
  case fb::BufferKind::Weight:
    name = "weight[" + index + "] " + text(artifact->weights()->Get(ref.index())->name());
    break;
  case fb::BufferKind::KvCache:
    name = "kv[" + std::to_string(ref.index() / 2) + (ref.index() % 2 ? "].V" : "].K");
    break;
  case fb::BufferKind::Input:
    name = ref.index() == 0   ? "input.tokens"
           : ref.index() == 1 ? "input.positions"
                              : "input.page_table";
    break;
  case fb::BufferKind::Output:
    name = "output.logits";
    break;
  case fb::BufferKind::Exchange:
    name = "exchange[group " + index + "]";
    break;
  }
  if (ref.offset() != 0 || ref.kind() == fb::BufferKind::Arena)
    name += "+" + std::to_string(ref.offset());
  std::vector<int64_t> shape = evaluateShape(ref, tokens);
  std::string dims = listText(shape);
  // The runtime sets a KV cache's first dimension to its slot count.
  if (ref.kind() == fb::BufferKind::KvCache)
    dims = "[slots" + dims.substr(dims.find(','));
  // And the page table's to the conversations' pages.
  if (ref.kind() == fb::BufferKind::Input && ref.index() == 2)
    dims = "[pages]";
  return name + " " + dtypeText(ref.dtype()) + dims;
}

// "tmap(buffer 1, box 64x128, swizzle 128B)": the box innermost first.
std::string tensorMapText(const fb::Launch &launch, int64_t index) {
  const auto *maps = launch.tensor_maps();
  if (!maps || index < 0 || static_cast<uint64_t>(index) >= maps->size())
    return "tmap(" + std::to_string(index) + "?)";
  const fb::TensorMap &map = *maps->Get(static_cast<flatbuffers::uoffset_t>(index));
  std::string box;
  if (const auto *sides = map.box())
    for (flatbuffers::uoffset_t d = 0; d < sides->size(); ++d)
      box += (d ? "x" : "") + std::to_string(sides->Get(d));
  return "tmap(buffer " + std::to_string(map.buffer()) + ", box " + box + ", swizzle " +
         (map.swizzle() ? std::to_string(map.swizzle()) + "B" : std::string("none")) + ")";
}

std::string scalarText(const fb::Launch &launch, const fb::Scalar &scalar) {
  switch (scalar.kind()) {
  case fb::ScalarKind::Constant:
    return std::to_string(scalar.value());
  case fb::ScalarKind::Tokens:
    return "T";
  case fb::ScalarKind::PastTokens:
    return "past";
  case fb::ScalarKind::Part:
    return "part";
  case fb::ScalarKind::Parts:
    return "parts";
  case fb::ScalarKind::GroupIndex:
    return "rank in comm group " + std::to_string(scalar.value());
  case fb::ScalarKind::SequenceTokens:
    return scalar.value() ? "split x T " + std::string(scalar.value() < 0 ? "- " : "+ ") +
                                std::to_string(std::abs(scalar.value()))
                          : "split x T";
  case fb::ScalarKind::TensorMap:
    return tensorMapText(launch, scalar.value());
  default:
    break;
  }
  return "?";
}

void dumpWeight(const fb::WeightBinding &weight, size_t index, std::ostream &out) {
  std::vector<int64_t> shape;
  if (weight.shape())
    shape.assign(weight.shape()->begin(), weight.shape()->end());
  out << "  [" << index << "] " << text(weight.name()) << "  " << dtypeText(weight.dtype())
      << listText(shape);
  if (weight.stack() > 0)
    out << "  stack " << weight.stack() << " from expert " << weight.first_expert();
  if (weight.transform() != fb::WeightTransform::None)
    out << "  transform " << fb::EnumNameWeightTransform(weight.transform());
  if (weight.slice_dim() >= 0)
    out << "  slice dim " << weight.slice_dim() << " in " << weight.slice_count();
  if (weight.slice_group() >= 0)
    out << (weight.slice_dim() >= 0 ? " by comm group " : "  expert block by comm group ")
        << weight.slice_group();
  out << "  " << bytesText(weight.bytes()) << "\n";
}

void dumpStep(const Artifact &artifact, const fb::StepEntry &step, size_t index, int64_t tokens,
              std::ostream &out) {
  out << "    [" << index << "] ";
  auto buffers = [&](const char *label, const auto *refs) {
    out << "        " << label << ":";
    if (!refs || refs->size() == 0)
      out << " none";
    for (flatbuffers::uoffset_t i = 0; refs && i < refs->size(); ++i)
      out << (i ? ", " : " ") << bufferText(artifact, *refs->Get(i), tokens);
    out << "\n";
  };
  if (const fb::Launch *launch = step.step_as_Launch()) {
    out << "launch " << text(artifact->kernels()->Get(launch->kernel())->name()) << "  op "
        << text(launch->op());
    if (launch->max_parts() > 1)
      out << "  parts <= " << launch->max_parts();
    out << "\n";
    buffers("buffers", launch->buffers());
    out << "        scalars:";
    const auto *scalars = launch->scalars();
    if (!scalars || scalars->size() == 0)
      out << " none";
    for (flatbuffers::uoffset_t i = 0; scalars && i < scalars->size(); ++i)
      out << (i ? ", " : " ") << scalarText(*launch, *scalars->Get(i));
    out << "\n";
  } else if (const fb::Copy *copy = step.step_as_Copy()) {
    out << "copy " << bufferText(artifact, *copy->source(), tokens) << " -> "
        << bufferText(artifact, *copy->destination(), tokens) << "\n";
  } else if (const fb::Collective *collective = step.step_as_Collective()) {
    out << "collective " << fb::EnumNameCollectiveKind(collective->kind()) << "  op "
        << text(collective->op()) << "  comm group " << collective->comm_group();
    if (collective->kind() != fb::CollectiveKind::AllReduce)
      out << "  axis " << collective->axis();
    out << "\n        " << bufferText(artifact, *collective->source(), tokens) << " -> "
        << bufferText(artifact, *collective->destination(), tokens) << "\n";
  }
}

void dumpEntryPoint(const Artifact &artifact, const fb::EntryPoint &entry,
                    const DumpOptions &options, std::ostream &out) {
  size_t launches = 0, copies = 0, collectives = 0;
  // Launches by the graph op their kernel implements (fused ops included),
  // collectives by kind, and launches that exchange through peer memory
  // (the combine of the peer MegaMoE kernel) by op.
  std::map<std::string, size_t> byOp, byKind, exchanging;
  const auto *kernels = artifact->kernels();
  const auto *steps = entry.steps();
  for (flatbuffers::uoffset_t i = 0; steps && i < steps->size(); ++i) {
    switch (steps->Get(i)->step_type()) {
    case fb::Step::Launch: {
      ++launches;
      const fb::Launch *launch = steps->Get(i)->step_as_Launch();
      if (kernels && launch->kernel() < kernels->size()) {
        const std::string op = text(kernels->Get(launch->kernel())->op());
        ++byOp[op];
        if (const auto *buffers = launch->buffers())
          for (const fb::BufferRef *buffer : *buffers)
            if (buffer->kind() == fb::BufferKind::Exchange) {
              ++exchanging[op];
              break;
            }
      }
      break;
    }
    case fb::Step::Copy:
      ++copies;
      break;
    default:
      ++collectives;
      if (const fb::Collective *collective = steps->Get(i)->step_as_Collective())
        ++byKind[fb::EnumNameCollectiveKind(collective->kind())];
      break;
    }
  }
  const int64_t tokens = entry.max_tokens();
  out << "entry point   " << text(entry.name()) << ": max_tokens " << tokens;
  if (entry.sequences() && entry.sequence_rows() > 1)
    out << " (" << entry.sequence_rows() << " rows of each of " << entry.sequences()
        << " conversations)";
  else if (entry.sequences())
    out << " (token t continues conversation t of " << entry.sequences() << ")";
  if (entry.token_split() > 1)
    out << " (sequence parallel: a call takes " << entry.token_split() << " x T tokens, T a rank)";
  out << ", arena " << bytesText(entry.arena_bytes());
  if (const fb::Dim *rows = entry.logits_rows()) {
    const int64_t first = evaluate(*rows, 1), last = evaluate(*rows, tokens);
    out << ", logits rows " << first;
    if (last != first)
      out << " at T=1, " << last << " at T=" << tokens;
  }
  out << "\n              " << launches + copies + collectives << " steps: " << launches
      << " launch, " << copies << " copy, " << collectives << " collective\n";
  // "name count, name count, ..." on one line, if there are any.
  auto counts = [&](const char *label, const std::map<std::string, size_t> &byName) {
    if (byName.empty())
      return;
    out << "              " << label << ":";
    const char *separator = " ";
    for (const auto &[name, count] : byName) {
      out << separator << name << " " << count;
      separator = ", ";
    }
    out << "\n";
  };
  counts("launches by op", byOp);
  counts("collectives by kind", byKind);
  counts("peer exchanges in", exchanging);
  if (!options.steps)
    return;
  out << "  steps (shapes at T=" << tokens << "):\n";
  for (flatbuffers::uoffset_t i = 0; steps && i < steps->size(); ++i)
    dumpStep(artifact, *steps->Get(i), i, tokens, out);
}

} // namespace

void dumpArtifact(const Artifact &artifact, const DumpOptions &options, std::ostream &out) {
  const fb::Artifact &root = artifact.root();
  out << "artifact      " << artifact.source() << ", " << bytesText(artifact.bytes().size())
      << "\n";

  const fb::Version &version = *root.version();
  out << "version       schema " << version.schema_major() << "." << version.schema_minor()
      << ", compiler " << text(version.compiler()) << "\n";
  if (const fb::Digests *digests = root.digests()) { // checked when the artifact loaded
    char line[96];
    std::snprintf(line, sizeof line, "digests       XXH64 library 0x%016llx, artifact 0x%016llx\n",
                  static_cast<unsigned long long>(digests->library()),
                  static_cast<unsigned long long>(digests->artifact()));
    out << line;
  }

  const fb::Target &target = *root.target();
  out << "target        " << targetKindName(target.kind()) << ", triple " << text(target.triple())
      << ", chip " << text(target.chip()) << ", features";
  const auto *features = target.features();
  if (!features || features->size() == 0)
    out << " none";
  for (flatbuffers::uoffset_t i = 0; features && i < features->size(); ++i)
    out << (i ? ", " : " ") << text(features->Get(i));
  if (target.kernels_wait_for_prior_grid())
    out << "; kernels wait for the grid before them (programmatic launches)";
  out << "\n";

  const fb::Model &model = *root.model();
  out << "model         " << text(model.name()) << ", weight format " << text(model.weight_format())
      << ", config " << bytesText(model.config_json() ? model.config_json()->size() : 0)
      << " of JSON\n";

  const fb::Layout &layout = *root.layout();
  out << "layout        tp " << layout.tp() << ", ep " << layout.ep() << ", sp "
      << (layout.sp() ? "on" : "off") << ", world " << layout.world();
  if (root.rank() != 0) // schema 1.2's one artifact per rank
    out << "; rank " << root.rank();
  else if (layout.world() > 1)
    out << "; every rank runs this artifact";
  out << "\n";
  if (const auto *groups = root.comm_groups()) {
    out << "comm groups   " << groups->size() << ":";
    for (flatbuffers::uoffset_t g = 0; g < groups->size(); ++g) {
      const fb::CommGroup &group = *groups->Get(g);
      const size_t size = group.size(), count = group.ranks()->size() / size;
      out << (g ? "; " : " ") << "[" << g << "] " << text(group.name()) << " (" << count
          << (count == 1 ? " group of " : " groups of ") << size << ":";
      for (flatbuffers::uoffset_t r = 0; r < group.ranks()->size(); ++r)
        out << (r && r % size == 0 ? " /" : "") << " " << group.ranks()->Get(r);
      out << ")";
      if (group.exchange_bytes())
        out << ", " << group.exchange_bytes() << " bytes of peer exchange a member";
    }
    out << "\n";
  }

  uint64_t weightBytes = 0;
  for (size_t i = 0; i < artifact.numWeights(); ++i)
    weightBytes += root.weights()->Get(static_cast<flatbuffers::uoffset_t>(i))->bytes();
  out << "weights       " << artifact.numWeights()
      << (artifact.numWeights() == 1 ? " binding, " : " bindings, ") << bytesText(weightBytes)
      << "\n";
  if (options.weights)
    for (size_t i = 0; i < artifact.numWeights(); ++i)
      dumpWeight(*root.weights()->Get(static_cast<flatbuffers::uoffset_t>(i)), i, out);

  size_t global = 0, sliding = 0;
  uint64_t globalBytes = 0, slidingBytes = 0, ringSlack = 0, pageTokens = 0;
  std::string dtypes; // the caches' element types, each once
  for (size_t i = 0; i < artifact.numKvCaches(); ++i) {
    const fb::KvCache &cache = *root.kv_caches()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const std::string dtype(dtypeName(toDType(cache.dtype())));
    if (("/" + dtypes + "/").find("/" + dtype + "/") == std::string::npos)
      dtypes += (dtypes.empty() ? "" : "/") + dtype;
    // K and V per position.
    const uint64_t perToken =
        2ull * cache.kv_heads() * cache.head_dim() * dtypeSize(toDType(cache.dtype()));
    if (cache.window() == 0) {
      ++global;
      globalBytes += perToken;
      pageTokens = cache.page_tokens();
    } else {
      ++sliding;
      slidingBytes += perToken;
      if (cache.ring() > cache.window())
        ringSlack = cache.ring() - cache.window();
    }
  }
  out << "kv caches     " << artifact.numKvCaches() << " (" << global << " global, " << sliding
      << " sliding" << (dtypes.empty() ? "" : ", " + dtypes)
      << (pageTokens ? ", global ones in pages of " + std::to_string(pageTokens) + " positions"
                     : std::string())
      << "); K+V bytes per token: " << globalBytes << " global, " << slidingBytes
      << " sliding (up to their windows"
      << (ringSlack ? ", rings of window + " + std::to_string(ringSlack) + " for verify rollback"
                    : std::string())
      << ")\n";

  // With the device kilnc planned for, what fits on it too.
  const ArtifactMemory memory = artifactMemory(artifact);
  std::optional<uint64_t> planned;
  if (memory.plannedDeviceBytes > 0)
    planned = memory.plannedDeviceBytes;
  char device[64] = "";
  if (planned)
    std::snprintf(device, sizeof(device), " (planned for %.2f GiB a device)",
                  double(*planned) / double(uint64_t{1} << 30));
  out << "memory per rank" << device << ":\n";
  printMemoryPlan(out, memory, planned, memory.plannedReserveBytes);

  const fb::KernelLibrary &library = *root.library();
  out << "kernels       " << artifact.numKernels() << ", library " << text(library.format()) << " "
      << bytesText(library.blob() ? library.blob()->size() : 0) << "\n";
  for (size_t i = 0; i < artifact.numKernels(); ++i) {
    const fb::Kernel &kernel = *root.kernels()->Get(static_cast<flatbuffers::uoffset_t>(i));
    out << "  [" << i << "] " << text(kernel.name()) << "  op " << text(kernel.op()) << "  tiling "
        << text(kernel.tiling());
    if (kernel.shared_bytes())
      out << "  shared " << kernel.shared_bytes() << " bytes";
    out << "\n";
  }

  for (const fb::EntryPoint *entry : *root.entry_points())
    dumpEntryPoint(artifact, *entry, options, out);
}

int kilnDumpMain(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  DumpOptions options;
  std::vector<std::string> files;
  for (const std::string &arg : args) {
    if (arg == "--help" || arg == "-h") {
      out << kUsage;
      return 0;
    }
    if (arg == "--weights") {
      options.weights = true;
    } else if (arg == "--steps") {
      options.steps = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      err << "kiln-dump: unknown option " << quoteName(arg) << "\n" << kUsage;
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.size() != 1) {
    err << "kiln-dump: expected one artifact file, got " << files.size() << "\n" << kUsage;
    return 2;
  }
  try {
    dumpArtifact(Artifact::load(files[0]), options, out);
  } catch (const std::exception &error) {
    err << error.what() << "\n";
    return 1;
  }
  return 0;
}

} // namespace kiln
