#include "targets/nvptx/WgmmaExperts.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"
#include "targets/nvptx/WgmmaExpertTiles.h"
#include "targets/nvptx/WgmmaNvfp4Experts.h"
#include "targets/nvptx/WgmmaPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx {

using namespace mlir;
using kernels::ExpertTileShape;

namespace {

using namespace expert_tiles;

constexpr int64_t kStages = 4;
constexpr int64_t kRowsThreads = 128; // the rows kernel's block
// Registers a thread after setmaxnreg: the producer only issues copies.
constexpr uint32_t kProducerRegs = 40, kConsumerRegs = 232;
static_assert(wgmma::registersFit(kProducerRegs, kConsumerRegs));

// The shape with this file's tiles.
ExpertTileShape wideTiles(ExpertTileShape s) {
  s.tileRows = kTileRows;
  return s;
}

// The columns of one weight matrix a block takes: gate and up share the B
// tile (up to 128 rows), down fills it.
int64_t matrixCols(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? std::min<int64_t>(64, s.intermediate)
                              : std::min<int64_t>(128, s.latent);
}
int64_t bRows(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? 2 * matrixCols(s, p) : matrixCols(s, p);
}
// The weight rows a block computes.
int64_t blockCols(const ExpertTileShape &s, Product p) {
  return s.nvfp4 ? nvfp4BlockCols(p) : matrixCols(s, p);
}
int64_t colTiles(const ExpertTileShape &s, Product p) { return outCols(s, p) / blockCols(s, p); }

// bf16 weights: tokens as M, the weights as B, both brought by the TMA.
class ExpertGemmBuilder {
public:
  ExpertGemmBuilder(kernels::KernelScope &k, const ExpertTileShape &s, Product product,
                    int64_t kDim, const std::string &smemName)
      : k(k), b(k.b), s(s), product(product), args{s, product}, cols(matrixCols(s, product)),
        kSteps(kDim / wgmma::kTileK), smemName(smemName) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value tilesAcross = k.index(colTiles(s, product));
    t = tileOfBlock(k, s, arith::DivUIOp::create(b, bid, tilesAcross), k.arg(1), k.arg(2));
    n0 = arith::MulIOp::create(b, arith::RemUIOp::create(b, bid, tilesAcross), k.index(cols));
    wgmma::Ring ring(k, layout(), smemName);
    ring.initBarriers(tid, 1, kConsumerWarps);
    wgmma::splitRoles(
        k, tid, kProducerRegs, kConsumerRegs, [&](Value inGroup) { produce(ring, inGroup); },
        [&](Value consumer, Value inGroup) { consume(ring, consumer, inGroup); });
  }

  wgmma::RingLayout layout() const {
    return wgmma::RingLayout{kStages, kTileRows, bRows(s, product)};
  }

private:
  // Whether 64-row block `block` of the tile holds an item, warp-uniform.
  Value blockLive(Value block) {
    Value first = arith::MulIOp::create(b, block, k.index(wgmma::kConsumerRows));
    return warpUniform(k, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, first, t.rowsIn));
  }

  // Consumer c's row blocks c and c + 2: the ring's loop over those that
  // hold items (block c + 2 only where c does), then their epilogues, each
  // case in a branch of its own so that no accumulator crosses a branch
  // (ptxas would serialise the wgmma). Blocks past the items cost no wgmma.
  void consume(wgmma::Ring &ring, Value consumer, Value inGroup) {
    Value blocks[2] = {consumer, arith::AddIOp::create(b, consumer, k.index(2))};
    Value live[2] = {blockLive(blocks[0]), blockLive(blocks[1])};
    auto computeBlocks = [&](ValueRange liveBlocks) {
      SmallVector<Value> accs = ring.accumulateRowBlocks(liveBlocks, kSteps, inGroup);
      for (size_t i = 0; i < accs.size(); ++i) {
        if (product == Product::GateUp)
          storeGateUp(accs[i], liveBlocks[i], inGroup);
        else
          storeDown(accs[i], liveBlocks[i], inGroup);
      }
    };
    auto ifBoth = scf::IfOp::create(b, live[1], /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifBoth.getThenRegion().front());
    computeBlocks(ValueRange{blocks[0], blocks[1]});
    b.setInsertionPointToStart(&ifBoth.getElseRegion().front());
    auto ifFirst = scf::IfOp::create(b, live[0], /*withElse=*/true);
    b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
    computeBlocks(ValueRange{blocks[0]});
    b.setInsertionPointToStart(&ifFirst.getElseRegion().front());
    computeBlocks(ValueRange{});
  }

  // One thread has the TMA bring the rows and the weights.
  void produce(wgmma::Ring &ring, Value inGroup) {
    ExtraCopies weights;
    for (int64_t m = 0; m < matrices(product); ++m)
      weights.maps.push_back(args.map(1 + m));
    weights.bytes = ring.layout().bBytes();
    auto copyWeights = [&](ArrayRef<Value> maps, Value stage, Value kk, Value fullAt) {
      for (int64_t m = 0; m < matrices(product); ++m) {
        Value tileAt = ring.bOffset(stage);
        Value dst = ring.at(arith::AddIOp::create(b, tileAt, k.index(m * cols * wgmma::kRowBytes)));
        ring.copy(dst, maps[m], kk, {n0, t.expert}, fullAt);
      }
    };
    weights.copy = copyWeights;
    produceTileRows(k, ring, t, inGroup, args.map(0), kSteps, &weights);
  }

  // The accumulators of m64nNk16 for row block `block`: thread t of the
  // warpgroup holds, for each 8 columns j, rows 64 block + 16 (t / 32) +
  // (t % 32) / 4 and 8 below, columns 8j + 2 (t % 4) and the next:
  // registers 4j .. 4j + 3.
  struct Fragment {
    Value row, col;
  };
  Fragment fragment(Value block, Value inGroup) {
    Value warp = arith::DivUIOp::create(b, inGroup, k.index(32));
    Value lane = arith::RemUIOp::create(b, inGroup, k.index(32));
    Value row =
        arith::AddIOp::create(b, arith::MulIOp::create(b, block, k.index(wgmma::kConsumerRows)),
                              arith::AddIOp::create(b, arith::MulIOp::create(b, warp, k.index(16)),
                                                    arith::DivUIOp::create(b, lane, k.index(4))));
    Value col = arith::AddIOp::create(
        b, n0, arith::MulIOp::create(b, arith::RemUIOp::create(b, lane, k.index(4)), k.index(2)));
    return {row, col};
  }
  // h = silu(gate) * up (gate in columns 0 .. cols - 1 of the accumulators,
  // up in cols ..), bf16, at the tile's rows of h.
  void storeGateUp(Value acc, Value block, Value inGroup) {
    Fragment f = fragment(block, inGroup);
    Value one = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f));
    Value tileRow =
        arith::AddIOp::create(b, arith::MulIOp::create(b, t.tile, k.index(kTileRows)), f.row);
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, tileRow, k.index(8 * half));
      for (int64_t j = 0; j < cols / 8; ++j) {
        SmallVector<Value> pair;
        for (int64_t e = 0; e < 2; ++e) {
          Value g = LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{4 * j + 2 * half + e});
          Value u = LLVM::ExtractValueOp::create(
              b, acc, ArrayRef<int64_t>{4 * (j + cols / 8) + 2 * half + e});
          pair.push_back(kernels::swiGlu(b, g, u, one));
        }
        Value h = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()),
                                          vector::FromElementsOp::create(b, f32x2, pair));
        Value col = arith::AddIOp::create(b, f.col, k.index(8 * j));
        vector::StoreOp::create(b, h, k.arg(args.out()), ValueRange{row, col}, false,
                                llvm::MaybeAlign(4));
      }
    }
  }

  // y[t, j, :] of each row that holds an item (t * k + j), scaled.
  void storeDown(Value acc, Value block, Value inGroup) {
    Fragment f = fragment(block, inGroup);
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, f.row, k.index(8 * half));
      OpBuilder::InsertionGuard guard(b);
      ItemPlace place = itemOfRow(k, s, t, row);
      for (int64_t j = 0; j < cols / 8; ++j) {
        SmallVector<Value> pair;
        for (int64_t e = 0; e < 2; ++e)
          pair.push_back(
              LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{4 * j + 2 * half + e}));
        Value col = arith::AddIOp::create(b, f.col, k.index(8 * j));
        vector::StoreOp::create(b, vector::FromElementsOp::create(b, f32x2, pair),
                                k.arg(args.out()), ValueRange{place.token, place.choice, col},
                                false, llvm::MaybeAlign(8));
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const ExpertTileShape &s;
  Product product;
  GemmArgs args;
  int64_t cols, kSteps;
  std::string smemName;
  TileOfBlock t;
  Value n0;
};

kernels::Tiling gemmTiling(const ExpertTileShape &s, Product p) {
  kernels::Tiling tiling;
  tiling.set("kind", p == Product::GateUp ? "wgmma-expert-gateup" : "wgmma-expert-down");
  if (s.nvfp4) // the weights as M, the items as N
    tiling.set("tile_m", nvfp4BlockCols(p))
        .set("tile_n", kTileRows)
        .set("stages", nvfp4RingLayout().stages)
        .set("weights", "nvfp4-register-a");
  else
    tiling.set("tile_m", kTileRows)
        .set("tile_n", bRows(s, p))
        .set("stages", kStages)
        .set("weights", "bf16-tma");
  tiling.set("tile_k", wgmma::kTileK).set("block", kThreads).set("swizzle", 128);
  return tiling;
}

kernels::KernelSpec expertGemm(const ExpertTileShape &s, Product p, bool dropLastStep) {
  const std::string name =
      std::string(p == Product::GateUp ? "expert_gateup_wgmma_" : "expert_down_wgmma_") +
      (dropLastStep ? "broken_" : "") + kernels::expertShapeSuffix(s);
  const std::string smemName = name + "_smem";
  const int64_t in = inDim(s, p), out = outCols(s, p);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type i64 = b.getI64Type();
    std::vector<Type> types = {MemRefType::get({dynamic, in}, b.getBF16Type())};
    kernels::appendExpertListTypes(b, s, types);
    for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
      kernels::appendProjectionTypes(b, s, out, in, types);
    types.push_back(p == Product::GateUp
                        ? Type(MemRefType::get({dynamic, out}, b.getBF16Type()))
                        : Type(MemRefType::get({dynamic, s.k, out}, b.getF32Type())));
    types.push_back(i64); // the rows' tensor map
    if (!s.nvfp4)
      for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
        types.push_back(i64); // the weights' tensor maps
    return types;
  };
  wgmma::RingLayout ring{};
  kernels::KernelSpec spec = kernels::buildKernel(
      name, "kiln.megamoe", gemmTiling(s, p), args, [&](kernels::KernelScope &scope) {
        wgmma::declareKernel(scope, smemName, kThreads);
        const int64_t kDim = dropLastStep ? in - wgmma::kTileK : in;
        if (s.nvfp4) {
          ring = nvfp4RingLayout();
          buildNvfp4ExpertGemm(scope, s, p, kDim / wgmma::kTileK, smemName);
          return;
        }
        ExpertGemmBuilder builder(scope, s, p, kDim, smemName);
        ring = builder.layout();
        builder.build();
      });
  spec.sharedBytes = ring.sharedBytes();
  return spec;
}

std::vector<std::string> gemmScalars(const ExpertTileShape &s, Product p) {
  const std::string k = std::to_string(wgmma::kTileK);
  std::vector<std::string> scalars = {"tmap:0:" + k + "," + std::to_string(wgmma::kConsumerRows) +
                                      ":128"};
  if (!s.nvfp4)
    for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
      scalars.push_back("tmap:" + std::to_string(4 + m) + ":" + k + "," +
                        std::to_string(matrixCols(s, p)) + ",1:128");
  scalars.push_back("part");
  scalars.push_back("parts");
  return scalars;
}

// The rows kernel: a block of 128 threads a (tile, row); 8 elements a
// thread a pass. Rows past the items are zeros up to the next 64 (the row
// blocks the GEMMs compute); the rest are never read.
kernels::KernelSpec expertRows(const ExpertTileShape &s) {
  const std::string name = "expert_rows_bf16_" + kernels::expertShapeSuffix(s);
  kernels::Tiling tiling;
  tiling.set("kind", "expert-rows").set("block", kRowsThreads).set("vector", 8);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    std::vector<Type> types = {MemRefType::get({dynamic, s.latent}, b.getF32Type())};
    kernels::appendExpertListTypes(b, s, types);
    types.push_back(MemRefType::get({dynamic, s.latent}, b.getBF16Type()));
    return types;
  };
  return kernels::buildKernel(name, "kiln.megamoe", tiling, args, [&](kernels::KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value r = arith::RemUIOp::create(b, bid, k.index(kTileRows));
    TileOfBlock t =
        tileOfBlock(k, s, arith::DivUIOp::create(b, bid, k.index(kTileRows)), k.arg(1), k.arg(2));
    Value row = arith::AddIOp::create(b, arith::MulIOp::create(b, t.tile, k.index(kTileRows)), r);
    Value begin = arith::MulIOp::create(b, tid, k.index(8));
    auto f32x8 = VectorType::get({8}, b.getF32Type());
    auto bf16x8 = VectorType::get({8}, b.getBF16Type());
    Value blockEnd = computedRows(k, t.rowsIn);
    auto ifItem = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, t.rowsIn), /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getThenRegion().front());
      Value item = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, k.arg(3), ValueRange{arith::AddIOp::create(b, t.base, r)}));
      Value token = arith::DivUIOp::create(b, item, k.index(s.k));
      auto loop = scf::ForOp::create(b, begin, k.index(s.latent), k.index(8 * kRowsThreads));
      b.setInsertionPointToStart(loop.getBody());
      Value c = loop.getInductionVar();
      Value z;
      if (s.nvfp4) {
        // Fragment order (WgmmaNvfp4Experts.h): positions 8i .. 8i + 7 of a
        // step hold its k 2i, 2i + 1, then the pairs 16, 32 and 48 on.
        Value i = arith::DivUIOp::create(b, arith::RemUIOp::create(b, c, k.index(wgmma::kTileK)),
                                         k.index(8));
        Value first = arith::AddIOp::create(
            b, arith::SubIOp::create(b, c, arith::RemUIOp::create(b, c, k.index(wgmma::kTileK))),
            arith::MulIOp::create(b, i, k.index(2)));
        auto f32x2 = VectorType::get({2}, b.getF32Type());
        SmallVector<Value> pairs;
        for (int64_t p = 0; p < 4; ++p)
          pairs.push_back(vector::LoadOp::create(
              b, f32x2, k.arg(0),
              ValueRange{token, arith::AddIOp::create(b, first, k.index(16 * p))}, false,
              llvm::MaybeAlign(8)));
        z = vector::ShuffleOp::create(
            b, vector::ShuffleOp::create(b, pairs[0], pairs[1], ArrayRef<int64_t>{0, 1, 2, 3}),
            vector::ShuffleOp::create(b, pairs[2], pairs[3], ArrayRef<int64_t>{0, 1, 2, 3}),
            ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
      } else {
        z = vector::LoadOp::create(b, f32x8, k.arg(0), ValueRange{token, c}, false,
                                   llvm::MaybeAlign(16));
      }
      vector::StoreOp::create(b, arith::TruncFOp::create(b, bf16x8, z), k.arg(4),
                              ValueRange{row, c}, false, llvm::MaybeAlign(16));
    }
    {
      // Rows past the tile's items in a computed row block: zeros, so that
      // every product is finite.
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getElseRegion().front());
      auto ifComputed = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, blockEnd), /*withElse=*/false);
      b.setInsertionPointToStart(&ifComputed.getThenRegion().front());
      Value zero = arith::ConstantOp::create(
          b, DenseElementsAttr::get(bf16x8, FloatAttr::get(b.getBF16Type(), 0.0)));
      auto loop = scf::ForOp::create(b, begin, k.index(s.latent), k.index(8 * kRowsThreads));
      b.setInsertionPointToStart(loop.getBody());
      vector::StoreOp::create(b, zero, k.arg(4), ValueRange{row, loop.getInductionVar()}, false,
                              llvm::MaybeAlign(16));
    }
  });
}

} // namespace

bool wgmmaExpertsFit(const ExpertTileShape &s) {
  for (Product p : {Product::GateUp, Product::Down}) {
    int64_t cols = matrixCols(s, p);
    if (cols % 32 != 0 || outCols(s, p) % cols != 0 || inDim(s, p) % wgmma::kTileK != 0)
      return false;
  }
  return s.latent % 8 == 0 && (!s.nvfp4 || nvfp4ExpertsFit(s)) && kernels::expertListsFit(s);
}

kernels::TargetHooks::MatrixExperts wgmmaExperts(const ExpertTileShape &shape, bool dropLastStep) {
  const ExpertTileShape s = wideTiles(shape);
  kernels::TargetHooks::MatrixExperts experts;
  experts.lists = kernels::expertLists(s);
  experts.listsWork = kernels::expertListsWork(s);
  experts.gateUp = expertGemm(s, Product::GateUp, dropLastStep);
  experts.down = expertGemm(s, Product::Down, false);
  experts.gateUpWork =
      kernels::Work{s.maxTiles() * colTiles(s, Product::GateUp) * kThreads, 0, kThreads};
  experts.downWork =
      kernels::Work{s.maxTiles() * colTiles(s, Product::Down) * kThreads, 0, kThreads};
  experts.metaWords = s.experts + 2;
  experts.tileWords = 2 * s.maxTiles();
  experts.itemWords = s.maxItems();
  experts.rows = kernels::KernelLaunch{
      expertRows(s), kernels::Work{s.maxTiles() * kTileRows * kRowsThreads, 0, kRowsThreads}};
  // maxTiles() tiles of 256 rows: at most 256 (E + 1) + k T.
  experts.tileRows = kTileRows * (s.experts + 1);
  experts.gateUpScalars = gemmScalars(s, Product::GateUp);
  experts.downScalars = gemmScalars(s, Product::Down);
  return experts;
}

} // namespace kiln::nvptx
