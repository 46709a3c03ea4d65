// Benchmark (not a test): Kiln's generated AMX GEMM against oneDNN's bf16
// matmul on the decode and prefill shapes of muse-spark-tiny and -small,
// measured in the same run, printed as a ratio. Both read bf16 activations
// and prepacked bf16 weights and write f32.
//
//   build/bin/kiln-bench-x86-gemm [--reps N]
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/WeightLayout.h"
#include "targets/x86/AmxGemm.h"
#include "targets/x86/KernelCompiler.h"

#include "mlir/IR/MLIRContext.h"

#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
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

template <typename F> double medianSeconds(int reps, F &&f) {
  f(); // warm up
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: kiln-bench-x86-gemm [--reps N]\n");
      return 2;
    }
  }
  if (!kiln::cpuHasAmx()) {
    std::fprintf(stderr, "kiln-bench-x86-gemm: this CPU has no AMX\n");
    return 1;
  }
  kiln::requestAmx();

  // Decode (M = 1 token, one 16-row tile) and prefill shapes of the two test
  // configs: q_proj, o_proj, pooler, unpooler and the output head.
  std::vector<Shape> shapes = {
      {"tiny q_proj decode", 1, 192, 256},     {"tiny lm_head decode", 1, 1024, 256},
      {"tiny o_proj prefill", 64, 256, 192},   {"small q_proj decode", 1, 3072, 2048},
      {"small o_proj decode", 1, 2048, 3072},  {"small pooler decode", 1, 1024, 2048},
      {"small lm_head decode", 1, 32000, 2048}, {"small q_proj prefill", 256, 3072, 2048},
      {"small o_proj prefill", 256, 2048, 3072}, {"small unpooler prefill", 256, 2048, 1024},
  };

  std::vector<kiln::kernels::KernelSpec> specs;
  for (const Shape &s : shapes)
    specs.push_back(kiln::x86::linearAmx(s.n, s.k));
  mlir::MLIRContext context;
  std::vector<uint8_t> library;
  std::string error;
  if (!kiln::x86::compileKernelLibrary(context, specs, kiln::x86::CompileOptions(), library, error)) {
    std::fprintf(stderr, "kiln-bench-x86-gemm: %s\n", error.c_str());
    return 1;
  }
  kiln::KernelLibrary kernels = kiln::KernelLibrary::load(library.data(), library.size(), "<bench>");
  kiln::ThreadPool pool;

  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::printf("%-24s %5s %6s %6s %12s %12s %8s %10s\n", "shape", "M", "N", "K", "kiln GFLOP/s",
              "oneDNN GF/s", "ratio", "max |diff|");
  for (const Shape &s : shapes) {
    int64_t mp = (s.m + 15) / 16 * 16;
    std::vector<uint16_t> a(mp * s.k, 0), w(s.n * s.k), packed(s.n * s.k);
    for (int64_t i = 0; i < s.m * s.k; ++i)
      a[i] = toBf16(normal(rng));
    for (auto &x : w)
      x = toBf16(normal(rng) / std::sqrt(float(s.k)));
    kiln::amxVnniBf16(w.data(), s.n, s.k, packed.data());
    std::vector<float> c(mp * s.n), ref(s.m * s.n);

    kiln::KernelFn fn = kernels.resolve("kiln_linear_amx_" + std::to_string(s.n) + "x" + std::to_string(s.k));
    int parts = static_cast<int>(std::min<int64_t>(s.n / 16, pool.numThreads()));
    double kiln = medianSeconds(reps, [&] {
      pool.run(parts, [&](int part) {
        kiln::memref::DescriptorStorage da, db, dc;
        int64_t sa[2] = {mp, s.k}, sb[2] = {s.n * s.k / 32, 32}, sc[2] = {mp, s.n};
        int64_t p = part, ps = parts;
        void *args[5] = {kiln::memref::buildDescriptor(da, a.data(), sa, 2),
                         kiln::memref::buildDescriptor(db, packed.data(), sb, 2),
                         kiln::memref::buildDescriptor(dc, c.data(), sc, 2), &p, &ps};
        fn(args);
      });
    });

    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc aMd({s.m, s.k}, dt::bf16, tag::ab), wUser({s.k, s.n}, dt::bf16, tag::ba),
        wAny({s.k, s.n}, dt::bf16, tag::any), cMd({s.m, s.n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(aMd, wAny, cMd), engine);
    dnnl::memory aMem(aMd, engine, a.data()), wUserMem(wUser, engine, w.data()),
        wMem(pd.weights_desc(), engine), cMem(cMd, engine, ref.data());
    dnnl::reorder(wUserMem, wMem).execute(stream, wUserMem, wMem); // prepack, untimed
    dnnl::matmul matmul(pd);
    double onednn = medianSeconds(reps, [&] {
      matmul.execute(stream, {{DNNL_ARG_SRC, aMem}, {DNNL_ARG_WEIGHTS, wMem}, {DNNL_ARG_DST, cMem}});
      stream.wait();
    });

    double worst = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        worst = std::max(worst, double(std::abs(c[i * s.n + j] - ref[i * s.n + j])));
    double flops = 2.0 * s.m * s.n * s.k;
    std::printf("%-24s %5lld %6lld %6lld %12.1f %12.1f %8.2f %10.2e\n", s.what, (long long)s.m,
                (long long)s.n, (long long)s.k, flops / kiln / 1e9, flops / onednn / 1e9,
                onednn / kiln, worst);
  }
  std::printf("ratio = oneDNN time / Kiln time (above 1: Kiln is faster); %d threads, median of %d\n",
              pool.numThreads(), reps);
  return 0;
}
