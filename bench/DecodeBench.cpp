// kiln-bench-decode: decode and prefill speed of an artifact beside the
// memory roofline measured in the same run (a GPU's HBM, or on a CPU the host
// memory every core copies through).
//
//   kiln-bench-decode ARTIFACT [--weights synthetic:1] [--context 4096]
//                     [--steps 32] [--tensor-tflops R] [--json FILE]
//
// It loads the artifact with its weights, prefills `context` tokens (timed),
// decodes `steps` tokens one at a time through the CUDA graph (timed on the
// host; the greedy token chosen on the device as a serving loop does, then
// as many steps with the logits downloaded and chosen on the host), profiles
// one more decode step and one prefill call launch by launch (CUDA events),
// and measures the device-to-device copy bandwidth with a 2 GiB copy (on a
// CPU, a 1 GiB copy split over its cores). An artifact with a
// decode_batch entry (kilnc --decode-batch N) also gets N conversations of
// `context` tokens each, stepped `steps` times together (each step's greedy
// tokens chosen on the device; also timed with every row's logits copied to
// the host), with their roofline
// (the experts N tokens touch under uniform routing, N KV caches) and a
// profile of one batched step. The roofline of a decode step is the bytes it must read
// (every weight once, except the embedding table's one row and the experts the
// router did not pick; the KV cache of every layer up to its window) over that
// bandwidth. The roofline of the prefill is its matrix FLOPs (weights times
// tokens, the experts the router picks, attention over the causal window) at
// the bf16 tensor-core rate R measured beside it (bench/h200-proxy.sh passes
// PyTorch's 8192^3 matmul rate from the same run).
#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/kiln_artifact_generated.h"
#include "runtime/comm/RankLauncher.h"
#include "runtime/core/AtomicFile.h"
#include "runtime/core/FlagValue.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/WeightBinder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fb = kiln::artifact;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string artifact;
  std::string weights = "synthetic:1";
  int64_t context = 4096;
  int steps = 32;
  double tensorTflops = 0;
  std::string json;
  int nproc = 1;
};

[[noreturn]] void usage(const char *why, int status = 2) {
  std::fprintf(
      status ? stderr : stdout,
      "kiln-bench-decode: %s\n"
      "usage: kiln-bench-decode ARTIFACT [--weights SPEC] [--context N] "
      "[--steps N] [--tensor-tflops R] [--json FILE]\n"
      "  --weights SPEC  checkpoint directory or synthetic:SEED (default synthetic:1)\n"
      "  --context N     tokens prefilled before decoding, per conversation (default 4096)\n"
      "  --steps N       decode steps timed (greedy on the device, then as many with the\n"
      "                  logits to the host), and batched steps with a decode_batch entry\n"
      "                  (default 32)\n"
      "  --tensor-tflops R  measured bf16 tensor-core TFLOP/s: prints the prefill roofline\n"
      "  --json FILE     also write the figures as JSON (rank 0's)\n"
      "  --nproc N       a multi-rank artifact: N processes on this machine, one per\n"
      "                  GPU (as kiln-run --nproc); rank 0 prints its figures\n",
      why);
  std::exit(status);
}

template <typename Int>
Int integer(const std::string &flag, const std::string &text, Int min, Int max) {
  const std::optional<Int> value = kiln::integerIn(text, min, max);
  if (!value)
    usage(kiln::notAnIntegerIn(flag, text, min, max).c_str());
  return *value;
}

double positive(const std::string &flag, const std::string &text) {
  const std::optional<double> value = kiln::finiteNumber(text);
  if (!value || *value <= 0 || *value > 1e9)
    usage(
        (flag + ": " + kiln::quoteName(text) + " is not a number above 0 and at most 1e9").c_str());
  return *value;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--help" || a == "-h")
      usage("decode and prefill speed beside the HBM roofline", 0);
    else if (a == "--weights")
      o.weights = value();
    else if (a == "--context")
      o.context = integer<int64_t>(a, value(), 1, int64_t{1} << 24);
    else if (a == "--steps")
      o.steps = integer<int>(a, value(), 1, 1 << 20);
    else if (a == "--tensor-tflops")
      o.tensorTflops = positive(a, value());
    else if (a == "--json")
      o.json = value();
    else if (a == "--nproc")
      o.nproc = integer<int>(a, value(), 1, 1024);
    else if (!a.empty() && a[0] == '-')
      usage(("unknown option " + a).c_str());
    else if (o.artifact.empty())
      o.artifact = a;
    else
      usage("more than one artifact given");
  }
  if (o.artifact.empty())
    usage("no artifact given");
  if (o.context < 1 || o.steps < 1)
    usage("--context and --steps must be at least 1");
  return o;
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Device-to-device copy bandwidth, counting bytes read and written, from the
// best of several 2 GiB copies.
double copyBandwidth(int device) {
  auto driver = kiln::cuda::CudaDriver::system();
  const kiln::cuda::CudaApi &api = driver->api();
  auto ok = [](kiln::cuda::CUresult r, const char *what) {
    if (r != 0)
      throw std::runtime_error(std::string("copy bandwidth: ") + what + " failed");
  };
  kiln::cuda::CUdevice dev = 0;
  kiln::cuda::CUcontext ctx = nullptr;
  ok(api.cuDeviceGet(&dev, device), "cuDeviceGet");
  ok(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  ok(api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  const size_t bytes = size_t(2) << 30;
  kiln::cuda::CUdeviceptr a = 0, b = 0;
  ok(api.cuMemAlloc(&a, bytes), "cuMemAlloc");
  ok(api.cuMemAlloc(&b, bytes), "cuMemAlloc");
  ok(api.cuMemsetD8(a, 1, bytes), "cuMemsetD8");
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    ok(api.cuCtxSynchronize(), "cuCtxSynchronize");
    auto start = Clock::now();
    ok(api.cuMemcpyDtoD(b, a, bytes), "cuMemcpyDtoD");
    ok(api.cuCtxSynchronize(), "cuCtxSynchronize");
    if (rep > 0)
      best = std::min(best, msSince(start));
  }
  api.cuMemFree(a);
  api.cuMemFree(b);
  api.cuDevicePrimaryCtxRelease(dev);
  return 2.0 * double(bytes) / (best * 1e-3);
}

// Host memory copy bandwidth, counting bytes read and written, from the best
// of several copies of 1 GiB split over the CPUs the engine runs on (each
// thread its own slice): a CPU artifact's decode yardstick.
double hostCopyBandwidth() {
  const size_t bytes = size_t(1) << 30;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  kiln::ThreadPool pool;
  const int parts = pool.numThreads();
  const size_t slice = bytes / size_t(parts);
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    auto start = Clock::now();
    pool.run(parts, [&](int part) {
      std::memcpy(b.data() + size_t(part) * slice, a.data() + size_t(part) * slice, slice);
    });
    if (rep > 0)
      best = std::min(best, msSince(start));
  }
  return 2.0 * double(slice * size_t(parts)) / (best * 1e-3);
}

struct StepBytes {
  double weights = 0, experts = 0, kv = 0;
  double total() const { return weights + experts + kv; }
};

// What one decode step at KV length `past` must read.
StepBytes decodeBytes(const kiln::Artifact &artifact, const nlohmann::json &config, int64_t past,
                      int64_t batch = 1) {
  const double topK = config.value("num_experts_per_tok", 1);
  const double vocab = config.value("vocab_size", 1);
  StepBytes bytes;
  for (const fb::WeightBinding *w : *artifact->weights()) {
    const std::string name = w->name()->str();
    const double b = double(w->bytes());
    // `batch` tokens each picking topK of E experts touch, with uniform
    // routing, E (1 - (1 - topK/E)^batch) distinct experts on average.
    const double picked = std::min(1.0, topK / double(std::max<uint32_t>(w->stack(), 1)));
    if (w->stack() > 0)
      bytes.experts += b * (1.0 - std::pow(1.0 - picked, double(batch)));
    else if (name == "model.embed_tokens.weight")
      bytes.weights += b / vocab * double(batch); // one row a token
    else
      bytes.weights += b;
  }
  for (const fb::KvCache *kv : *artifact->kv_caches()) {
    const int64_t positions = kv->window() ? std::min<int64_t>(kv->window(), past + 1) : past + 1;
    // K and V, in the cache's element type, each conversation's.
    bytes.kv += 2.0 * double(positions) * kv->kv_heads() * kv->head_dim() *
                double(kiln::dtypeSize(kiln::toDType(kv->dtype()))) * double(batch);
  }
  return bytes;
}

// A profile summed per kernel, largest first, printed as a table.
struct KernelRow {
  std::string kernel, op;
  int launches = 0;
  double ms = 0;
};
std::vector<KernelRow> printProfile(const std::string &what,
                                    const std::vector<kiln::Engine::StepTime> &profile) {
  std::map<std::string, KernelRow> byKernel;
  double total = 0;
  for (const auto &t : profile) {
    KernelRow &row = byKernel[t.kernel];
    row.kernel = t.kernel;
    ++row.launches;
    row.ms += t.milliseconds;
    if (row.op.empty())
      row.op = t.op;
    total += t.milliseconds;
  }
  std::vector<KernelRow> rows;
  for (auto &entry : byKernel)
    rows.push_back(entry.second);
  std::sort(rows.begin(), rows.end(),
            [](const KernelRow &a, const KernelRow &b) { return a.ms > b.ms; });
  std::printf("profile   %s launch by launch (no graph): %.3f ms in %zu launches\n", what.c_str(),
              total, profile.size());
  std::printf("  %-52s %8s %10s %7s\n", "kernel", "launches", "us", "share");
  for (const KernelRow &row : rows)
    std::printf("  %-52s %8d %10.1f %6.1f%%\n", row.kernel.c_str(), row.launches, row.ms * 1e3,
                100.0 * row.ms / total);
  return rows;
}

// The matrix FLOPs of a prefill of `tokens` tokens from an empty cache.
double prefillFlops(const kiln::Artifact &artifact, const nlohmann::json &config, int64_t tokens) {
  const double topK = config.value("num_experts_per_tok", 1);
  const double T = double(tokens);
  double flops = 0;
  for (const fb::WeightBinding *w : *artifact->weights()) {
    const std::string name = w->name()->str();
    double elements = 0;
    switch (w->dtype()) {
    case fb::DType::BF16:
      elements = double(w->bytes()) / 2;
      break;
    case fb::DType::U8: // NVFP4 codes, two a byte
      elements = double(w->bytes()) * 2;
      break;
    default: // scales
      continue;
    }
    if (!w->shape() || w->shape()->size() < 2 || name == "model.embed_tokens.weight")
      continue;
    if (name == "lm_head.weight")
      flops += 2 * elements; // the last token only
    else if (w->stack() > 0)
      flops += 2 * elements / double(w->stack()) * topK * T;
    else
      flops += 2 * elements * T;
  }
  // Attention: QK and PV over each query's visible keys.
  const double heads = config.value("num_attention_heads", 1);
  const double headDim = config.value("head_dim", 1);
  for (const fb::KvCache *kv : *artifact->kv_caches()) {
    double keys = 0;
    for (int64_t t = 0; t < tokens; ++t)
      keys += kv->window() ? std::min<double>(double(kv->window()), double(t + 1)) : double(t + 1);
    flops += 4 * heads * headDim * keys;
  }
  return flops;
}

// Each of `count` calls of `step`, timed on the host clock (ms); `after`
// runs untimed after each.
std::vector<double> timeSteps(const std::function<void()> &step, int count,
                              const std::function<void()> &after = {}) {
  std::vector<double> times;
  for (int i = 0; i < count; ++i) {
    auto start = Clock::now();
    step();
    times.push_back(msSince(start));
    if (after)
      after();
  }
  return times;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  Options options = parse(argc, argv);
  if (options.nproc > 1)
    return kiln::launchRanks("kiln-bench-decode",
                             kiln::withoutNproc(std::vector<std::string>(argv + 1, argv + argc)),
                             options.nproc, std::cerr);
  try {
    kiln::EngineOptions engineOptions;
    engineOptions.weights = options.weights;
    // The prompt, then the timed steps (greedy on the device, then with the
    // logits to the host), their warm-up and profile steps, and the batched
    // steps timed with logits to the host (a quarter as many).
    engineOptions.contextLength = options.context + 2 * options.steps + options.steps / 4 + 16;
    // A multi-rank artifact: one process per rank, each on its GPU
    // (EngineOptions::device's default).
    auto loadStart = Clock::now();
    engineOptions.progress = kiln::progressLines(stderr);
    auto engine = kiln::Engine::load(options.artifact, engineOptions);
    const kiln::Artifact &artifact = engine->artifact();
    const nlohmann::json config = nlohmann::json::parse(artifact->model()->config_json()->str());
    std::printf("device    %s\n", engine->device().c_str());
    std::printf("artifact  %s (%s), weights %.1f GiB, loaded in %.1f s\n", options.artifact.c_str(),
                artifact->model()->name()->c_str(),
                double(engine->weightBytes()) / double(1ull << 30), msSince(loadStart) / 1e3);

    const bool nvidia = artifact->target()->kind() == fb::TargetKind::NVPTX;
    const bool cpu = artifact->target()->kind() == fb::TargetKind::X86;
    const double bandwidth = nvidia ? copyBandwidth(kiln::localRank())
                             : cpu  ? hostCopyBandwidth()
                                    : 0.0;
    if (nvidia)
      std::printf("yardstick device-to-device copy: %.0f GB/s (bytes read + written)\n",
                  bandwidth / 1e9);
    else if (cpu)
      std::printf("yardstick host memory copy on every CPU: %.1f GB/s (bytes read + written)\n",
                  bandwidth / 1e9);
    else
      std::printf("yardstick none: the copy bandwidth is measured on NVIDIA GPUs and CPUs\n");
    const bool roofline = bandwidth > 0;

    // Prefill a deterministic prompt of `context` tokens.
    std::vector<int32_t> prompt(size_t(options.context));
    const int64_t vocab = engine->vocabSize();
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = int32_t((i * 7919 + 13) % uint64_t(vocab));
    auto prefillStart = Clock::now();
    std::vector<float> logits = engine->prefill(prompt);
    const double prefillMs = msSince(prefillStart);
    std::printf("prefill   %lld tokens in %.1f ms: %.0f tokens/s\n", (long long)options.context,
                prefillMs, double(options.context) * 1e3 / prefillMs);
    const double flops = prefillFlops(artifact, config, options.context);
    const double tensorMs =
        options.tensorTflops > 0 ? flops / (options.tensorTflops * 1e12) * 1e3 : 0;
    if (tensorMs > 0)
      std::printf("roofline  prefill %.1f TFLOP at %.0f TFLOP/s (bf16 tensor cores) = %.1f ms: "
                  "Kiln at %.1f%% of roofline\n",
                  flops / 1e12, options.tensorTflops, tensorMs, 100.0 * tensorMs / prefillMs);
    else
      std::printf(
          "roofline  prefill %.1f TFLOP (--tensor-tflops R prints its tensor-core roofline)\n",
          flops / 1e12);

    auto argmax = [](const std::vector<float> &v) {
      return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
    };
    int32_t token = argmax(logits);
    // Two untimed steps: the first runs directly, the second records the graph.
    for (int i = 0; i < 2; ++i)
      token = argmax(engine->decode(token));
    const int64_t pastAtStart = engine->pastTokens();
    // A step as a greedy serving loop runs it (as the batched steps below):
    // the token chosen where the logits are, only it comes back.
    const std::vector<double> stepMs =
        timeSteps([&] { token = engine->decodeGreedy(0, token); }, options.steps);
    // The same step returning the logits to the host, chosen there.
    const std::vector<double> logitStepMs = timeSteps(
        [&] { logits = engine->decode(token); }, options.steps, [&] { token = argmax(logits); });
    const double decodeMs = median(stepMs);
    const double logitsMs = median(logitStepMs);
    const StepBytes bytes = decodeBytes(artifact, config, pastAtStart);
    const double rooflineMs = roofline ? bytes.total() / bandwidth * 1e3 : 0.0;
    std::printf("decode    batch 1, KV length %lld: %.3f ms/token median of %d (min %.3f), "
                "%.1f tokens/s (greedy token chosen where the logits are)\n",
                (long long)pastAtStart, decodeMs, options.steps,
                *std::min_element(stepMs.begin(), stepMs.end()), 1e3 / decodeMs);
    std::printf("decode    batch 1 with the logits copied to the host and chosen there: %.3f "
                "ms/token median of %d (min %.3f)\n",
                logitsMs, options.steps, *std::min_element(logitStepMs.begin(), logitStepMs.end()));
    if (roofline)
      std::printf("roofline  %.3f GB a step (weights %.3f, experts %.3f, KV %.3f) / copy "
                  "bandwidth = %.3f ms: Kiln at %.1f%% of roofline (%.1f%% with the logits to "
                  "the host)\n",
                  bytes.total() / 1e9, bytes.weights / 1e9, bytes.experts / 1e9, bytes.kv / 1e9,
                  rooflineMs, 100.0 * rooflineMs / decodeMs, 100.0 * rooflineMs / logitsMs);

    // One step launch by launch.
    const std::vector<KernelRow> rows =
        printProfile("one decode step", engine->profileDecode(token));

    // One prefill call launch by launch, from an empty cache: the artifact's
    // largest chunk, or the whole context if smaller.
    int64_t chunk = 1;
    for (const auto *entry : *artifact->entry_points())
      if (entry->name()->str() == "prefill")
        chunk = entry->max_tokens();
    chunk = std::min<int64_t>(chunk, options.context);
    engine->reset();
    printProfile(
        "one prefill call of " + std::to_string(chunk) + " tokens",
        engine->profilePrefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + chunk)));

    // Batched decode: every conversation prefilled to the same context, then
    // one token each per decode_batch call.
    double batchMs = 0, batchLogitsMs = 0, batchRooflineMs = 0;
    const int64_t batch = engine->conversations();
    if (batch > 1) {
      engine->reset();
      auto fillStart = Clock::now();
      std::vector<int32_t> tokens(static_cast<size_t>(batch), 0);
      for (int64_t c = 0; c < batch; ++c) {
        std::vector<int32_t> own(prompt);
        for (int32_t &id : own)
          id = int32_t((id + 131 * c) % vocab);
        tokens[size_t(c)] = argmax(engine->prefill(c, own));
      }
      std::printf("prefill   %lld conversations of %lld tokens in %.1f s\n", (long long)batch,
                  (long long)options.context, msSince(fillStart) / 1e3);
      // A step as a greedy serving loop runs it: the tokens chosen where
      // the logits are (Engine::decodeBatchGreedy), only they come back.
      auto stepBatch = [&] { tokens = engine->decodeBatchGreedy(tokens); };
      // The same step returning every row's logits to the host, chosen there.
      auto stepBatchLogits = [&] {
        std::vector<float> rows = engine->decodeBatch(tokens);
        for (int64_t c = 0; c < batch; ++c)
          tokens[size_t(c)] =
              int32_t(std::max_element(rows.begin() + c * vocab, rows.begin() + (c + 1) * vocab) -
                      (rows.begin() + c * vocab));
      };
      for (int i = 0; i < 2; ++i) // direct, then recorded
        stepBatch();
      const int64_t batchPast = engine->pastTokens(0);
      const std::vector<double> batchSteps = timeSteps(stepBatch, options.steps);
      batchMs = median(batchSteps);
      std::printf("decode    batch %lld, KV length %lld each: %.3f ms a step median of %d (min "
                  "%.3f): %.1f tokens/s per user, %.1f tokens/s in all (greedy tokens chosen "
                  "on the device)\n",
                  (long long)batch, (long long)batchPast, batchMs, options.steps,
                  *std::min_element(batchSteps.begin(), batchSteps.end()), 1e3 / batchMs,
                  double(batch) * 1e3 / batchMs);
      const int logitSteps = std::max(2, options.steps / 4);
      batchLogitsMs = median(timeSteps(stepBatchLogits, logitSteps));
      std::printf("decode    batch %lld with every row's logits copied to the host and chosen "
                  "there: %.3f ms a step median of %d\n",
                  (long long)batch, batchLogitsMs, logitSteps);
      printProfile("one batched step", engine->profileDecodeBatch(tokens));
      if (roofline) {
        const StepBytes batchBytes = decodeBytes(artifact, config, batchPast, batch);
        batchRooflineMs = batchBytes.total() / bandwidth * 1e3;
        std::printf("roofline  %.3f GB a step (weights %.3f, experts %.3f with uniform routing, "
                    "KV %.3f) / copy bandwidth = %.3f ms: Kiln at %.1f%% of roofline\n",
                    batchBytes.total() / 1e9, batchBytes.weights / 1e9, batchBytes.experts / 1e9,
                    batchBytes.kv / 1e9, batchRooflineMs, 100.0 * batchRooflineMs / batchMs);
      }
    } else {
      std::printf("decode    batched: the artifact has no decode_batch entry (kilnc "
                  "--decode-batch N)\n");
    }

    if (!options.json.empty() && engine->rank() == 0) {
      nlohmann::json out;
      out["device"] = engine->device();
      out["copy_bandwidth_GBps"] = bandwidth / 1e9;
      out["prefill_tokens"] = options.context;
      out["prefill_ms"] = prefillMs;
      out["prefill_tflop"] = flops / 1e12;
      out["prefill_tensor_roofline_ms"] = tensorMs;
      out["decode_kv_length"] = pastAtStart;
      out["decode_ms_per_token"] = decodeMs;
      out["decode_logits_to_host_ms_per_token"] = logitsMs;
      out["decode_bytes"] = bytes.total();
      out["roofline_ms"] = rooflineMs;
      out["roofline_fraction"] = rooflineMs / decodeMs;
      if (batch > 1) {
        out["decode_batch"] = batch;
        out["decode_batch_ms_per_step"] = batchMs;
        out["decode_batch_logits_to_host_ms_per_step"] = batchLogitsMs;
        out["decode_batch_roofline_ms"] = batchRooflineMs;
      }
      for (const KernelRow &row : rows)
        out["profile_us"][row.kernel] = row.ms * 1e3;
      kiln::writeFileAtomically(options.json, out.dump(2) + "\n");
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-bench-decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
