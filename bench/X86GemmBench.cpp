// Benchmark (not a test): Kiln's generated GEMM for this CPU (the family its
// features choose: AMX tiles, AVX-512 BF16 dot products or FMA; --cpu NAME
// for another family this CPU runs) against oneDNN's bf16 matmul (which
// picks its own ISA, printed beside it) on the decode and prefill shapes of
// muse-spark-tiny and -small, measured in the same run, printed as a ratio.
// Both read bf16 activations and prepacked bf16 weights and write f32.
//
//   build/bin/kiln-bench-x86-gemm [--cpu NAME] [--reps N]
#include "runtime/core/FlagValue.h"
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/WeightLayout.h"
#include "targets/x86/CpuTarget.h"
#include "targets/x86/KernelCompiler.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/IR/MLIRContext.h"

#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Shape {
  const char *what;
  int64_t m, n, k;
};

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// Median seconds of `a` and of `b` over `reps` runs each, in alternating
// blocks (a warm-up, then a quarter of the runs), so that both see the same
// machine: a shared host's bandwidth drifts over a run. A pause between
// blocks lets the other's threads (OpenMP spins before sleeping) go idle.
template <typename A, typename B>
std::pair<double, double> medianSecondsOfBoth(int reps, A &&a, B &&b) {
  std::vector<double> ta, tb;
  auto block = [&](auto &f, std::vector<double> &times, int runs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f();
    for (int r = 0; r < runs; ++r) {
      auto start = std::chrono::steady_clock::now();
      f();
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  const int blocks = 4, runs = std::max(1, reps / blocks);
  for (int i = 0; i < blocks; ++i) {
    block(a, ta, runs);
    block(b, tb, runs);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// oneDNN's OpenMP threads are created at its first parallel run and inherit
// the creating thread's CPU affinity: run one before Kiln pins this thread.
void startOpenMpThreads(const dnnl::engine &engine, dnnl::stream &stream) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::memory::desc aMd({64, 64}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(aMd, aMd, aMd), engine);
  dnnl::memory a(aMd, engine), b(aMd, engine), c(aMd, engine);
  dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
}

} // namespace

int main(int argc, char **argv) {
  int reps = 20;
  std::string cpuName = "host";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) {
      const std::optional<int> value = kiln::integerIn(std::string_view(argv[++i]), 1, 100000);
      if (!value) {
        std::fprintf(stderr, "kiln-bench-x86-gemm: %s\n",
                     kiln::notAnIntegerIn("--reps", argv[i], 1, 100000).c_str());
        return 2;
      }
      reps = *value;
    } else if (std::string(argv[i]) == "--cpu" && i + 1 < argc) {
      cpuName = argv[++i];
    } else {
      std::fprintf(stderr, "usage: kiln-bench-x86-gemm [--cpu NAME] [--reps N]\n");
      return 2;
    }
  }
  std::string error;
  std::optional<kiln::x86::CpuTarget> cpu = kiln::x86::resolveCpu(cpuName, error);
  if (!cpu) {
    std::fprintf(stderr, "kiln-bench-x86-gemm: %s\n", error.c_str());
    return 2;
  }
  for (const std::string &feature : cpu->features)
    if (!kiln::cpuHasFeature(feature).value_or(false)) {
      std::fprintf(stderr, "kiln-bench-x86-gemm: --cpu %s needs %s, which this CPU lacks\n",
                   cpuName.c_str(), feature.c_str());
      return 1;
    }
  if (kiln::needsAmx(cpu->features))
    kiln::requestAmx();
  kiln::x86::X86Hooks hooks(*cpu);

  // Decode (M = 1 token) and prefill shapes of the two test configs: q_proj,
  // o_proj, pooler, unpooler and the output head.
  std::vector<Shape> shapes = {
      {"tiny q_proj decode", 1, 192, 256},       {"tiny lm_head decode", 1, 1024, 256},
      {"tiny o_proj prefill", 64, 256, 192},     {"small q_proj decode", 1, 3072, 2048},
      {"small o_proj decode", 1, 2048, 3072},    {"small pooler decode", 1, 1024, 2048},
      {"small lm_head decode", 1, 32000, 2048},  {"small q_proj prefill", 256, 3072, 2048},
      {"small o_proj prefill", 256, 2048, 3072}, {"small unpooler prefill", 256, 2048, 1024},
  };

  std::vector<kiln::kernels::TargetHooks::TiledGemm> gemms;
  std::vector<kiln::kernels::KernelSpec> specs;
  for (const Shape &s : shapes) {
    // The kernel kilnc gives a decode step's GEMM (M = 1) or a prefill's
    // (decode and prefill may take different families on one CPU).
    std::optional<kiln::kernels::TargetHooks::TiledGemm> gemm =
        hooks.tiledGemm(s.n, s.k, /*decodeStep=*/s.m == 1);
    if (!gemm) {
      std::fprintf(stderr, "kiln-bench-x86-gemm: --cpu %s has no tiled GEMM (family %s)\n",
                   cpu->cpu.c_str(), kiln::x86::gemmFamilyName(hooks.gemmFamily()));
      return 1;
    }
    gemms.push_back(*gemm);
    specs.push_back(gemm->kernel);
  }
  mlir::MLIRContext context;
  std::vector<uint8_t> library;
  kiln::x86::CompileOptions options;
  options.cpu = *cpu;
  if (!kiln::x86::compileKernelLibrary(context, specs, options, library, error)) {
    std::fprintf(stderr, "kiln-bench-x86-gemm: %s\n", error.c_str());
    return 1;
  }
  kiln::KernelLibrary kernels =
      kiln::KernelLibrary::load(library.data(), library.size(), "<bench>");
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  startOpenMpThreads(engine, stream);
  // This thread and Kiln's workers each on a CPU of its own; OpenMP's
  // threads, started above, keep the whole machine.
  kiln::ThreadPool pool(0, /*pin=*/true);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::printf("cpu %s: Kiln's GEMMs on %s (%s; decode on %s), %d threads\n", cpu->cpu.c_str(),
              kiln::x86::gemmFamilyName(hooks.gemmFamily()),
              kiln::x86::gemmFamilyInstruction(hooks.gemmFamily()),
              kiln::x86::gemmFamilyName(hooks.familyFor(true)), pool.numThreads());
  std::printf("%-24s %5s %6s %6s %-10s %12s %12s %8s %10s  %s\n", "shape", "M", "N", "K", "kiln's",
              "kiln GFLOP/s", "oneDNN GF/s", "ratio", "max |diff|", "oneDNN's kernel");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &s = shapes[i];
    int64_t mp = (s.m + 15) / 16 * 16;
    std::vector<uint16_t> a(mp * s.k, 0), w(s.n * s.k), packed(s.n * s.k);
    for (int64_t i = 0; i < s.m * s.k; ++i)
      a[i] = toBf16(normal(rng));
    for (auto &x : w)
      x = toBf16(normal(rng) / std::sqrt(float(s.k)));
    kiln::vnniBf16Blocks(w.data(), s.n, s.k, packed.data());
    std::vector<float> c(mp * s.n), ref(s.m * s.n);

    kiln::KernelFn fn = kernels.resolve("kiln_" + gemms[i].kernel.name);
    int parts = static_cast<int>(std::min<int64_t>(gemms[i].work.constant, pool.numThreads()));
    auto runKiln = [&] {
      pool.run(parts, [&](int part) {
        kiln::memref::DescriptorStorage da, db, dc;
        int64_t sa[2] = {mp, s.k}, sb[2] = {s.n * s.k / 32, 32}, sc[2] = {mp, s.n};
        int64_t rows = s.m, p = part, ps = parts;
        void *args[6] = {kiln::memref::buildDescriptor(da, a.data(), sa, 2),
                         kiln::memref::buildDescriptor(db, packed.data(), sb, 2),
                         kiln::memref::buildDescriptor(dc, c.data(), sc, 2),
                         &rows,
                         &p,
                         &ps};
        fn(args);
      });
    };

    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc aMd({s.m, s.k}, dt::bf16, tag::ab), wUser({s.k, s.n}, dt::bf16, tag::ba),
        wAny({s.k, s.n}, dt::bf16, tag::any), cMd({s.m, s.n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(aMd, wAny, cMd), engine);
    dnnl::memory aMem(aMd, engine, a.data()), wUserMem(wUser, engine, w.data()),
        wMem(pd.weights_desc(), engine), cMem(cMd, engine, ref.data());
    dnnl::reorder(wUserMem, wMem).execute(stream, wUserMem, wMem); // prepack, untimed
    dnnl::matmul matmul(pd);
    auto runOnednn = [&] {
      matmul.execute(stream,
                     {{DNNL_ARG_SRC, aMem}, {DNNL_ARG_WEIGHTS, wMem}, {DNNL_ARG_DST, cMem}});
      stream.wait();
    };
    auto [kiln, onednn] = medianSecondsOfBoth(reps, runKiln, runOnednn);

    double worst = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        worst = std::max(worst, double(std::abs(c[i * s.n + j] - ref[i * s.n + j])));
    double flops = 2.0 * s.m * s.n * s.k;
    std::printf("%-24s %5lld %6lld %6lld %-10s %12.1f %12.1f %8.2f %10.2e  %s\n", s.what,
                (long long)s.m, (long long)s.n, (long long)s.k,
                kiln::x86::gemmFamilyName(hooks.familyFor(s.m == 1)), flops / kiln / 1e9,
                flops / onednn / 1e9, onednn / kiln, worst, pd.impl_info_str());
  }
  std::printf("ratio = oneDNN time / Kiln time (above 1: Kiln is faster); median of %d\n", reps);
  return 0;
}
