// kilnc: compiles a Muse Spark config. Today it builds the kiln graph of one
// forward pass, runs the graph pipeline on it and prints the IR (--emit=graph)
// and/or a report of what the graph holds (--report). MLIR's own options
// (--mlir-print-ir-after-all, --mlir-timing, ...) apply to the pipeline.
#include "compiler/kilnc/Backend.h"
#include "compiler/pipeline/PassEffects.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/pipeline/RankMemory.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "models/muse_spark/Config.h"
#include "models/muse_spark/GraphBuilder.h"
#include "models/muse_spark/Report.h"
#include "passes/Passes.h"
#include "runtime/core/AtomicFile.h"
#include "runtime/core/Chip.h"
#include "targets/x86/CpuTarget.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sys/resource.h>
#include <unistd.h>

namespace cl = llvm::cl;
using namespace kiln::muse_spark;

namespace {

cl::OptionCategory kilncCategory("kilnc options");

cl::opt<std::string> configArg(cl::Positional, cl::value_desc("config"),
                               cl::desc("<config: a config.json path or a built-in name "
                                        "(see --list-configs)>"),
                               cl::cat(kilncCategory));

enum class Emit { Model, Graph, Plan, Kernels, Library, Artifact };
cl::opt<Emit> emit(
    "emit", cl::desc("What to write to -o (default: graph, or artifact with --target)"),
    cl::init(Emit::Graph),
    cl::values(clEnumValN(Emit::Model, "model",
                          "kiln graph IR of one forward pass as the model builder writes it, "
                          "before any fusion or sharding"),
               clEnumValN(Emit::Graph, "graph",
                          "the same after the graph pipeline: sharded for --tp/--ep/--sp, "
                          "norm/residual chains and expert stages fused"),
               clEnumValN(Emit::Plan, "plan",
                          "the target's plan IR (prefill and decode entry points, memory planned)"),
               clEnumValN(Emit::Kernels, "kernels",
                          "the target's generated kernels as MLIR, before lowering to LLVM"),
               clEnumValN(Emit::Library, "library",
                          "the target's compiled kernel library alone (x86: an ELF shared "
                          "object, needs -o FILE; nvptx: PTX text; amdgcn: an AMDGPU code "
                          "object, needs -o FILE)"),
               clEnumValN(Emit::Artifact, "artifact",
                          "the artifact the runtime loads (needs -o FILE)")),
    cl::cat(kilncCategory));

// --target: x86, or a row of the chip table (runtime/core/Chips.def) by its
// index; the values are added from the table before the command line is read.
enum TargetIndex : int { kNoTarget = -2, kX86Target = -1 };
cl::opt<TargetIndex> target("target", cl::desc("Compile for a target (default: stop at graph IR)"),
                            cl::init(kNoTarget), cl::cat(kilncCategory));

cl::opt<std::string> cpuName(
    "cpu",
    cl::desc("With --target=x86: the CPU by LLVM's name (sapphirerapids, graniterapids, znver4, "
             "znver5, x86-64-v4, x86-64-v3, ...; 'help' lists them) or host (the default: this "
             "machine's CPU and the features it has). Its features choose the GEMM kernels (AMX "
             "tiles, AVX-512 BF16 dot products, or FMA); the artifact runs on CPUs that have "
             "them all"),
    cl::value_desc("name"), cl::init("host"), cl::cat(kilncCategory));

cl::opt<int64_t>
    maxPrefillTokens("max-prefill-tokens",
                     cl::desc("Largest prompt chunk one prefill call takes (default 64)"),
                     cl::init(64), cl::cat(kilncCategory));

cl::opt<int64_t> decodeBatch(
    "decode-batch",
    cl::desc("Also build a decode_batch entry point that steps up to N conversations one "
             "token each in one call (default 1: none)"),
    cl::init(1), cl::cat(kilncCategory));

cl::opt<int64_t> verifyTokens(
    "verify-tokens",
    cl::desc("Also build a verify entry point for speculative decoding: up to N tokens of one "
             "conversation (the last accepted token and N-1 drafts) in one call, logits for "
             "each; sliding layers keep N-1 slots beyond their window for rollback; with "
             "--decode-batch M, M * N <= 128, also a verify_batch entry of N rows for each of M "
             "conversations (default 0: none)"),
    cl::init(0), cl::cat(kilncCategory));

cl::opt<int64_t> kvPageTokens(
    "kv-page-tokens",
    cl::desc("Keep the global layers' KV caches in pages of N positions (a power of two, 16 to "
             "4096) from one pool for all conversations, which the attention kernels find "
             "through a page table the runtime passes (default 0: each conversation's cache "
             "whole, one after another)"),
    cl::init(0), cl::cat(kilncCategory));

enum class MoEExchange { Peer, Collective };
cl::opt<MoEExchange> moeExchange(
    "moe-exchange", cl::desc("How expert parallelism combines in decode on GPUs (default peer)"),
    cl::init(MoEExchange::Peer),
    cl::values(clEnumValN(MoEExchange::Peer, "peer",
                          "inside one persistent MegaMoE kernel, through the expert group's "
                          "peer memory (NVLink; nvptx only, others fall back)"),
               clEnumValN(MoEExchange::Collective, "collective",
                          "separate expert kernels, then an all-reduce (NCCL)")),
    cl::cat(kilncCategory));

cl::opt<std::string> outputPath("o", cl::desc("Output file ('-' for stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(kilncCategory));

cl::opt<bool> report("report",
                     cl::desc("Print the parameter budget by part, the layer pattern and the "
                              "ops per layer instead of the IR (the IR still goes to -o FILE "
                              "when one is given)"),
                     cl::cat(kilncCategory));

cl::opt<int64_t> tokens("tokens", cl::desc("Tokens of the forward pass (default 16)"), cl::init(16),
                        cl::cat(kilncCategory));

enum class Quant { FromConfig, None, Nvfp4 };
cl::opt<Quant> quant(
    "quant",
    cl::desc("Expert weight format (default: nvfp4 when the config has a "
             "quantization_config, else none)"),
    cl::init(Quant::FromConfig),
    cl::values(clEnumValN(Quant::None, "none", "bf16 everywhere"),
               clEnumValN(Quant::Nvfp4, "nvfp4",
                          "NVFP4 experts in layers 1..L-2 (ModelOpt layout), bf16 elsewhere")),
    cl::cat(kilncCategory));

cl::opt<KvDType> kvDType(
    "kv-dtype",
    cl::desc("The KV cache's element type (default bf16); attention reads every key and value "
             "rounded to it"),
    cl::init(KvDType::BF16),
    cl::values(clEnumValN(KvDType::BF16, "bf16",
                          "2 bytes an element, as the serving stacks keep it"),
               clEnumValN(KvDType::F32, "f32", "4 bytes an element, keys and values exact"),
               clEnumValN(KvDType::FP8, "fp8",
                          "1 byte an element: e4m3 with a scale per layer for keys and one for "
                          "values (--kv-scales)")),
    cl::cat(kilncCategory));

cl::opt<std::string>
    kvScalesPath("kv-scales",
                 cl::desc("With --kv-dtype=fp8: a JSON file of every layer's "
                          "model.layers.{i}.self_attn.k_scale and v_scale (kiln-interp "
                          "--calibrate-kv-scales writes one); without it every scale is 1"),
                 cl::value_desc("file"), cl::cat(kilncCategory));

cl::opt<bool> lastTokenLogits("last-token-logits",
                              cl::desc("Compute the logits of the last token only (always so "
                                       "with --target)"),
                              cl::cat(kilncCategory));

cl::opt<int64_t> tp(
    "tp",
    cl::desc("Tensor-parallel ranks for attention (default 1); with --target, one artifact every "
             "rank runs (kiln-run --nproc N)"),
    cl::init(1), cl::cat(kilncCategory));
cl::opt<int64_t> ep("ep", cl::desc("Expert-parallel ranks for the MoE (default 1)"), cl::init(1),
                    cl::cat(kilncCategory));
cl::opt<bool> sp("sp",
                 cl::desc("Sequence parallelism over the TP group: reduce-scatter tokens after "
                          "o_proj, all-gather before QKV (needs --tp > 1 and --tokens divisible "
                          "by it)"),
                 cl::cat(kilncCategory));

cl::opt<bool> noFuse("no-fuse",
                     cl::desc("Skip the fusion passes (norm/residual, MegaMoE): every op reaches "
                              "the target as the model builder wrote it"),
                     cl::cat(kilncCategory));

// A GiB count as given ("0.5", "nan", "inf").
std::string gibText(double gib) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", gib);
  return text;
}
constexpr double kMaxMemoryGiB = 1048576; // a PiB
cl::opt<double> deviceMemory("device-memory", cl::init(0.0), cl::cat(kilncCategory));
cl::opt<bool> progressLines("progress",
                            cl::desc("Print a line as each stage ends (on by default when "
                                     "stderr is a terminal)"),
                            cl::cat(kilncCategory));
cl::opt<double> reserveMemory("reserve-memory",
                              cl::desc("GiB per device kept for the runtime beside the "
                                       "planned weights, arena and KV, recorded with "
                                       "--device-memory (default 8)"),
                              cl::init(8.0), cl::cat(kilncCategory));

// For the GPU checks' own test: an artifact with a kernel broken on purpose
// must fail them. Hidden: not for users. The faults the NVPTX hooks know.
constexpr const char *kFaults[] = {"wgmma-drop-k-step",         "attention-drop-tile",
                                   "expert-drop-k-step",        "narrow-experts-drop-k-step",
                                   "staged-experts-drop-chunk", "gemv-pair-first-weight",
                                   "expert-combine-drop-choice"};
cl::opt<std::string> injectFault("inject-fault", cl::Hidden,
                                 cl::desc("Build one kernel family wrong on purpose "
                                          "(wgmma-drop-k-step, attention-drop-tile, "
                                          "expert-drop-k-step, narrow-experts-drop-k-step, "
                                          "staged-experts-drop-chunk, gemv-pair-first-weight, "
                                          "expert-combine-drop-choice), "
                                          "to test the checks"),
                                 cl::init(""), cl::cat(kilncCategory));

cl::opt<bool> listConfigs("list-configs", cl::desc("List the built-in configs and exit"),
                          cl::cat(kilncCategory));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kilnc") << message << "\n";
  return 1;
}

int64_t peakRssKiB() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// --target's values and --device-memory's defaults, from the chip table.
void describeTargets() {
  static std::vector<std::string> help; // the option parser keeps StringRefs
  const std::vector<kiln::Chip> &chips = kiln::allChips();
  help.reserve(chips.size() + 1);
  target.getParser().addLiteralOption(
      "x86", kX86Target,
      "an x86-64 CPU (--cpu, default this machine's): an ELF kernel library in "
      "the artifact");
  std::string memory;
  for (size_t i = 0; i < chips.size(); ++i) {
    const kiln::Chip &chip = chips[i];
    std::string library = chip.kind == kiln::ChipKind::Amdgcn ? "a code object"
                          : chip.chip == chip.target
                              ? "PTX"
                              : "arch-specific PTX (" + std::string(chip.chip) + ")";
    help.push_back(std::string(chip.products) + ": " + library + " in the artifact");
    target.getParser().addLiteralOption(chip.target, TargetIndex(i), help.back());
    memory += (memory.empty() ? "" : ", ") + std::string(chip.target) + " " +
              std::to_string(chip.memoryGiB);
  }
  // Without --target, the --report's plan is for the chip table's first row.
  const kiln::Chip &first = kiln::allChips().front();
  deviceMemory.setInitialValue(double(first.memoryGiB));
  help.push_back("GiB of memory per device: the --report's memory plan, and with --target the "
                 "size an artifact's rank must fit, recorded in it (kiln-serve sizes a paged KV "
                 "pool by it) (default " +
                 std::to_string(first.memoryGiB) + ", " + std::string(first.target) +
                 "'s; with --target the chip's: " + memory +
                 "; x86 unchecked and unrecorded "
                 "unless given)");
  deviceMemory.setDescription(help.back());
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  describeTargets();
  // libLLVM registers every backend's options; --help shows kilnc's own and
  // MLIR's (--mlir-*), --help-hidden all of them.
  for (auto &[name, option] : cl::getRegisteredOptions()) {
    bool own = llvm::is_contained(option->Categories, &kilncCategory);
    if (!own && !name.starts_with("mlir-") && name != "help" && name != "version")
      option->setHiddenFlag(cl::Hidden);
  }
  cl::ParseCommandLineOptions(
      argc, argv,
      "kilnc: the Kiln compiler. Builds the kiln graph of one Muse Spark forward pass from a "
      "config and runs the graph pipeline on it.\n\n"
      "  kilnc muse-spark-tiny                  print the graph IR\n"
      "  kilnc muse-spark-open-816b-a42b --report\n"
      "  kilnc path/to/config.json --quant=nvfp4 -o graph.mlir\n"
      "  kilnc muse-spark-open-816b-a42b --tp 8 --ep 8 --sp --report\n");

  if (listConfigs) {
    for (const std::string &name : builtinConfigNames())
      llvm::outs() << name << "\n";
    return 0;
  }
  if (cpuName == "help") {
    llvm::outs() << "x86-64 CPUs for --cpu, with the GEMM family their features choose:\n";
    for (const std::string &name : kiln::x86::knownCpuNames()) {
      std::string error;
      std::optional<kiln::x86::CpuTarget> cpu = kiln::x86::resolveCpu(name, error);
      kiln::x86::GemmFamily family = kiln::x86::gemmFamilyFor(*cpu);
      llvm::outs() << llvm::formatv("  {0,-20} {1} ({2})\n", name,
                                    kiln::x86::gemmFamilyName(family),
                                    kiln::x86::gemmFamilyInstruction(family));
    }
    llvm::outs() << "  host                 this machine's CPU, with the features it has\n";
    return 0;
  }
  if (configArg.empty())
    return fail("no config given: name a config.json or a built-in config (see --list-configs)");
  if (cpuName.getNumOccurrences() && target != kX86Target)
    return fail("--cpu chooses an x86 CPU: it needs --target=x86 (GPU chips are targets: "
                "--target=sm_90, gfx950, ...)");
  std::optional<kiln::x86::CpuTarget> cpu;
  if (target == kX86Target) {
    std::string error;
    cpu = kiln::x86::resolveCpu(cpuName, error);
    if (!cpu)
      return fail(error);
  }
  if (tokens < 1)
    return fail("--tokens must be at least 1, got " + llvm::Twine(tokens));
  // As many ranks as kiln-run --nproc starts, at most.
  constexpr int64_t kMaxRanks = 1024;
  if (tp < 1 || ep < 1 || tp > kMaxRanks || ep > kMaxRanks)
    return fail("--tp and --ep take a rank count in 1.." + llvm::Twine(kMaxRanks) + ", got --tp " +
                llvm::Twine(int64_t(tp)) + " --ep " + llvm::Twine(int64_t(ep)));
  if (sp && tp < 2)
    return fail("--sp splits tokens over the TP group: it needs --tp of at least 2");
  kiln::Layout layout{tp, ep, sp, !noFuse};
  // A target gets the layout without SP for decode and prefill remainders,
  // and the SP graph for its "prefill_sp" entry.
  kiln::Layout graphLayout = layout;
  if (target != kNoTarget && sp) {
    graphLayout.sp = false;
    graphLayout.splitPooler = false;
  }
  Emit what = emit;
  if (target != kNoTarget && emit.getNumOccurrences() == 0)
    what = Emit::Artifact;
  bool backend = what == Emit::Plan || what == Emit::Kernels || what == Emit::Library ||
                 what == Emit::Artifact;
  if (backend && target == kNoTarget)
    return fail("--emit=plan, kernels, library and artifact need a --target");
  if (backend && sp && ep > 1 && ep != tp)
    return fail("--sp with a --target and --ep needs --ep equal to --tp: the experts' dispatch "
                "gathers the tokens of the ranks that share them");
  if (maxPrefillTokens < 1)
    return fail("--max-prefill-tokens must be at least 1");
  if (tokens < 1)
    return fail("--tokens must be at least 1, got " + std::to_string(tokens));
  // Memory flags in GiB: finite, above zero (a reserve may be zero), below a
  // PiB, so that bytes fit in 64 bits and the fit check cannot be skipped.
  auto memoryProblem = [](const char *flag, double gib, bool zeroOk) -> std::string {
    if (std::isfinite(gib) && (zeroOk ? gib >= 0 : gib > 0) && gib <= kMaxMemoryGiB)
      return "";
    return std::string(flag) + " must be a number of GiB " + (zeroOk ? "from 0" : "above 0") +
           " to " + std::to_string(int64_t(kMaxMemoryGiB)) + ", got " + gibText(gib);
  };
  if (std::string problem = memoryProblem("--device-memory", deviceMemory, false); !problem.empty())
    return fail(problem);
  if (std::string problem = memoryProblem("--reserve-memory", reserveMemory, true);
      !problem.empty())
    return fail(problem);
  if (deviceMemory.getNumOccurrences() > 0 && reserveMemory >= deviceMemory)
    return fail("--reserve-memory " + gibText(reserveMemory) +
                " GiB leaves nothing of --device-memory " + gibText(deviceMemory) + " GiB");
  if (decodeBatch < 1 || decodeBatch > 1024)
    return fail("--decode-batch must be 1 to 1024, got " + std::to_string(decodeBatch));
  if (verifyTokens != 0 && (verifyTokens < 2 || verifyTokens > 64))
    return fail("--verify-tokens must be 0 (none) or 2 to 64, got " + std::to_string(verifyTokens));
  if (kvPageTokens != 0 &&
      (kvPageTokens < 16 || kvPageTokens > 4096 || (kvPageTokens & (kvPageTokens - 1)) != 0))
    return fail("--kv-page-tokens must be 0 (unpaged) or a power of two from 16 to 4096, got " +
                std::to_string(kvPageTokens));
  if (what == Emit::Model && layout.devices() > 1)
    return fail("--tp, --ep and --sp shape the graph pipeline: use them with --emit=graph");

  Config config;
  try {
    config = loadConfig(configArg);
  } catch (const ConfigError &error) {
    return fail(error.what());
  }
  // A prefill call's tokens take positions: no more than the model has.
  if (maxPrefillTokens > config.maxPositionEmbeddings)
    return fail("--max-prefill-tokens " + std::to_string(maxPrefillTokens) +
                ": more than the model's max_position_embeddings (" +
                std::to_string(config.maxPositionEmbeddings) + ")");
  if (!backend && tokens > config.maxPositionEmbeddings)
    return fail("--tokens " + std::to_string(tokens) +
                ": more than the model's max_position_embeddings (" +
                std::to_string(config.maxPositionEmbeddings) + ")");
  WeightFormat format = quant == Quant::Nvfp4  ? WeightFormat::NVFP4
                        : quant == Quant::None ? WeightFormat::BF16
                        : config.quantization  ? WeightFormat::NVFP4
                                               : WeightFormat::BF16;

  mlir::MLIRContext context;
  context.loadDialect<kiln::KilnDialect, kiln::plan::PlanDialect, mlir::func::FuncDialect,
                      mlir::shard::ShardDialect>();

  GraphOptions options;
  // A target serves prefills of any length and decode: dynamic tokens.
  options.tokens = backend ? mlir::ShapedType::kDynamic : int64_t(tokens);
  options.format = format;
  options.kvType = kvDType;
  if (!kvScalesPath.empty()) {
    if (kvDType != KvDType::FP8)
      return fail("--kv-scales " + kvScalesPath + ": scales are an FP8 cache's (--kv-dtype=fp8)");
    try {
      options.kvScales = readKvScales(kvScalesPath, config);
    } catch (const ConfigError &error) {
      return fail(error.what());
    }
  }
  // Generation reads the last token's logits only: a target computes just those.
  options.lastTokenLogits = lastTokenLogits || backend;
  const bool terminal = isatty(STDERR_FILENO);
  const bool showProgress = terminal || progressLines;
  options.progress = [&](int64_t done, int64_t total) {
    if (terminal)
      llvm::errs() << "\rkilnc: building layer " << done << "/" << total
                   << (done == total ? "\n" : "");
  };
  auto stageStart = std::chrono::steady_clock::now();
  auto stage = [&](const std::string &what) {
    if (!showProgress)
      return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stageStart).count();
    llvm::errs() << "kilnc: " << what << " (" << llvm::formatv("{0:F1}", seconds) << " s)\n";
    stageStart = std::chrono::steady_clock::now();
  };
  auto start = std::chrono::steady_clock::now();
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardGraph(context, config, options);
  BuildStats stats;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (mlir::failed(mlir::verify(*module)))
    return fail("the graph built for " + config.name + " does not verify (see above)");
  stage("graph: " + std::to_string(config.numHiddenLayers) + " layers of " + config.name);

  mlir::PassManager pm(&context);
  if (mlir::failed(mlir::applyPassManagerCLOptions(pm)))
    return fail("bad pass manager options");
  mlir::applyDefaultTimingPassManagerCLOptions(pm);
  std::vector<kiln::PassEffect> effects;
  pm.addInstrumentation(std::make_unique<kiln::PassEffectsRecorder>(effects));
  if (what == Emit::Model)
    pm.addPass(kiln::createVerifyWeights());
  else
    kiln::buildGraphPipeline(pm, graphLayout);
  if (mlir::failed(pm.run(*module)))
    return fail("the graph pipeline failed (see above)");
  mlir::OwningOpRef<mlir::ModuleOp> spModule;
  if (graphLayout.sp != layout.sp) {
    spModule = buildForwardGraph(context, config, options);
    mlir::PassManager spPm(&context);
    kiln::buildGraphPipeline(spPm, layout);
    if (mlir::failed(spPm.run(*spModule)))
      return fail("the sequence-parallel graph pipeline failed (see above)");
  }
  stats.peakRssKiB = peakRssKiB();
  stage("graph pipeline for " + std::to_string(layout.devices()) +
        (layout.devices() == 1 ? " device" : " devices"));

  if (report) {
    mlir::FailureOr<ParameterBudget> budget = countParameters(*module, config, format);
    if (mlir::failed(budget))
      return fail("the graph does not match the checkpoint manifest (see above)");
    printReport(llvm::outs(), *module, config, format, *budget, stats);
    llvm::outs() << "\npipeline for " << layout.devices() << " device"
                 << (layout.devices() == 1 ? "" : "s") << " (TP" << layout.tp << ", EP" << layout.ep
                 << (layout.sp ? ", SP" : "") << "):\n";
    for (const kiln::PassEffect &effect : effects)
      llvm::outs() << "  " << kiln::describe(effect) << "\n";
    if (what == Emit::Graph) {
      kiln::RankMemory memory = kiln::rankMemory(*module);
      if (!kiln::printRankMemory(llvm::outs(), memory, int64_t(deviceMemory * (1ll << 30)),
                                 int64_t(reserveMemory * (1ll << 30)),
                                 layout.devices() == 1
                                     ? "one device"
                                     : "each of " + std::to_string(layout.devices()) + " devices"))
        return fail("the layout does not fit in " +
                    llvm::formatv("{0:F0}", double(deviceMemory)).str() +
                    " GiB per device (see the memory plan above)");
    }
    if (outputPath == "-" && !backend)
      return 0;
  }

  if (backend) {
    kiln::BackendRequest request;
    request.output = what == Emit::Plan      ? kiln::BackendOutput::Plan
                     : what == Emit::Kernels ? kiln::BackendOutput::Kernels
                     : what == Emit::Library ? kiln::BackendOutput::Library
                                             : kiln::BackendOutput::Artifact;
    request.outputPath = outputPath;
    request.maxPrefillTokens = maxPrefillTokens;
    request.decodeBatch = decodeBatch;
    request.verifyTokens = verifyTokens;
    request.kvPageTokens = kvPageTokens;
    request.peerExchange = moeExchange == MoEExchange::Peer;
    request.report = report;
    request.config = &config;
    request.spGraph = spModule ? *spModule : mlir::ModuleOp();
    request.progress = showProgress;
    // The device an artifact's rank must fit, recorded in it: the chip's
    // memory unless --device-memory names another; x86 runs in the host's
    // memory, unchecked unless named.
    const kiln::Chip *chip = target >= 0 ? &kiln::allChips()[target] : nullptr;
    double gib = deviceMemory;
    if (deviceMemory.getNumOccurrences() == 0)
      gib = chip ? double(chip->memoryGiB) : 0.0;
    request.target = chip ? kiln::TargetChoice::forChip(*chip) : kiln::TargetChoice::x86(*cpu);
    if (gib > 0) {
      request.target.memoryBytes = uint64_t(gib * double(1ull << 30));
      request.target.reserveBytes = uint64_t(reserveMemory * double(1ull << 30));
    }
    if (!injectFault.empty() && !(llvm::is_contained(kFaults, injectFault) && chip &&
                                  chip->matrix == kiln::MatrixCores::Wgmma)) {
      llvm::ArrayRef<const char *> faults(kFaults);
      return fail("--inject-fault: the faults are " + llvm::join(faults.drop_back(), ", ") +
                  " and " + faults.back() + ", with --target=sm_90");
    }
    request.target.fault = injectFault;
    return kiln::runBackend(*module, request);
  }

  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  os << "\n";
  if (outputPath == "-") {
    llvm::outs() << text;
    return 0;
  }
  // Whole or not at all: a failed or interrupted run leaves no partial file.
  try {
    kiln::writeFileAtomically(outputPath, text);
  } catch (const kiln::FileWriteError &error) {
    return fail(error.what());
  }
  return 0;
}
