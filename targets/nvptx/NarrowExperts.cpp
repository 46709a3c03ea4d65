#include "targets/nvptx/NarrowExperts.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"
#include "targets/nvptx/NarrowMma.h"
#include "targets/nvptx/Nvfp4Bf16.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

namespace kiln::nvptx {

using namespace mlir;
using kernels::ExpertTileShape;

namespace {

using narrow::kChunk;
using narrow::kItems;
using narrow::kWarpRows;
constexpr int64_t kRows = narrow::kTileRows;
constexpr int64_t kBlock = 128;

enum class Product { GateUp, Down };

int64_t inDim(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.latent : s.intermediate;
}
int64_t outDim(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.intermediate : s.latent;
}
// Warps per tile of items: a warp holds 16 rows of gate and of up, or 32
// rows of down.
int64_t warpsPerTile(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.intermediate / kRows : s.latent / kWarpRows;
}
// The lists' tiles an entry can have: each listed expert one, and one more
// for every 128 items.
int64_t tileBound(const ExpertTileShape &s) {
  return std::min(s.experts, s.maxItems()) +
         (s.maxItems() + kernels::kExpertTileRows - 1) / kernels::kExpertTileRows;
}
int64_t chunksPerStep(const ExpertTileShape &s, Product p) {
  return narrow::chunksPerStep(inDim(s, p), s.nvfp4);
}
// NVFP4 blocks a thread takes of a row in a chunk (NarrowMma.h).
int64_t blocksPerChunk(const ExpertTileShape &s, Product p) {
  return narrow::blocksPerChunk(inDim(s, p), s.nvfp4);
}
int64_t matrices(Product p) { return p == Product::GateUp ? 2 : 1; }

class NarrowBuilder {
public:
  NarrowBuilder(kernels::KernelScope &k, const ExpertTileShape &s, Product p, int64_t steps)
      : k(k), b(k.b), s(s), p(p), steps(steps), i32(b.getI32Type()), f32(b.getF32Type()) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value warp = arith::AddIOp::create(b, arith::MulIOp::create(b, bid, k.index(kBlock / 32)),
                                       arith::DivUIOp::create(b, tid, k.index(32)));
    Value lane = arith::RemUIOp::create(b, tid, k.index(32));
    Value perTile = k.index(warpsPerTile(s, p));
    Value tile = arith::DivUIOp::create(b, warp, perTile);
    Value rowTile = arith::RemUIOp::create(b, warp, perTile);
    Value count = loadIndex(k.arg(1), k.index(s.experts + 1));
    auto ifLive = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tile, count), /*withElse=*/false);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    Value at = arith::MulIOp::create(b, tile, k.index(2));
    expert = loadIndex(k.arg(2), at);
    Value firstRow = loadIndex(k.arg(2), arith::AddIOp::create(b, at, k.index(1)));
    Value first = loadIndex(k.arg(1), expert);
    Value end = loadIndex(k.arg(1), arith::AddIOp::create(b, expert, k.index(1)));
    base = arith::AddIOp::create(b, first, firstRow);
    items = arith::MinUIOp::create(b, arith::SubIOp::create(b, end, base),
                                   k.index(kernels::kExpertTileRows));
    g = arith::DivUIOp::create(b, lane, k.index(4));
    t = arith::RemUIOp::create(b, lane, k.index(4));
    // Rows g and g + 8 of each MMA tile: gate's and up's, or down's two.
    Value rowA = arith::AddIOp::create(
        b, arith::MulIOp::create(b, rowTile, k.index(p == Product::GateUp ? kRows : kWarpRows)), g);
    for (int64_t tileOfWarp = 0; tileOfWarp < 2; ++tileOfWarp)
      for (int64_t half = 0; half < 2; ++half) {
        int64_t offset = 8 * half + (p == Product::GateUp ? 0 : kRows * tileOfWarp);
        rows.push_back({p == Product::GateUp ? tileOfWarp : 0,
                        arith::AddIOp::create(b, rowA, k.index(offset))});
      }
    if (s.nvfp4)
      for (int64_t m = 0; m < matrices(p); ++m)
        globalScales.push_back(decodedGlobalScale(b, k.arg(weightArg(m) + 2), expert));

    auto groups = scf::ForOp::create(b, k.index(0), items, k.index(kItems));
    b.setInsertionPointToStart(groups.getBody());
    Value group = groups.getInductionVar();
    // Item g of the group feeds B (the group's last item where it has fewer).
    Value last = arith::SubIOp::create(b, items, k.index(1));
    Value mine = arith::MinUIOp::create(b, arith::AddIOp::create(b, group, g), last);
    Item source = item(arith::AddIOp::create(b, base, mine));
    narrow::Operands ops;
    ops.in = inDim(s, p);
    ops.nvfp4 = s.nvfp4;
    ops.steps = steps;
    ops.g = g;
    ops.t = t;
    // (function_ref: the callables must outlive the calls.)
    auto rowOf = [&](int64_t r, Value chunk, SmallVectorImpl<Value> &raw) {
      loadRow(rows[r], chunk, raw);
    };
    auto xOf = [&](int64_t, Value col) {
      SmallVector<Value> at = {source.token};
      if (p == Product::Down)
        at.push_back(source.choice);
      at.push_back(col);
      return vector::LoadOp::create(b, VectorType::get({4}, f32), k.arg(0), at, false,
                                    llvm::MaybeAlign(16))
          .getResult();
    };
    ops.loadRow = rowOf;
    ops.loadX = xOf;
    store(narrow::products(k, ops, 1), group);
  }

private:
  struct Row {
    int64_t matrix;
    Value row;
  };
  struct Item {
    Value token, choice;
  };

  Value loadIndex(Value ref, Value at) {
    Value v = memref::LoadOp::create(b, ref, ValueRange{at});
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Item item(Value position) {
    Value id = loadIndex(k.arg(3), position);
    return {arith::DivUIOp::create(b, id, k.index(s.k)),
            arith::RemUIOp::create(b, id, k.index(s.k))};
  }
  // The first argument of weight matrix m (gate 0, up 1; down 0).
  unsigned weightArg(int64_t m) const { return 4 + m * kernels::projectionArgCount(s); }
  unsigned outArg() const { return 4 + matrices(p) * kernels::projectionArgCount(s); }

  // Row `r`'s raw weights of chunk `chunk` for this thread: NVFP4 codes
  // (vector<2 span x i32>) and scales (i8, or vector<span x i8>), or bf16
  // (vector<8xi32>).
  void loadRow(const Row &r, Value chunk, SmallVectorImpl<Value> &raw) {
    Value ref = k.arg(weightArg(r.matrix));
    if (s.nvfp4) {
      const int64_t span = blocksPerChunk(s, p);
      Type i8 = b.getI8Type();
      Value byte =
          arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, k.index(kChunk / 2 * span)),
                                arith::MulIOp::create(b, t, k.index(8 * span)));
      Value codes = vector::LoadOp::create(b, VectorType::get({8 * span}, i8), ref,
                                           ValueRange{expert, r.row, byte}, false,
                                           llvm::MaybeAlign(8 * span));
      raw.push_back(vector::BitCastOp::create(b, VectorType::get({2 * span}, i32), codes));
      Value block = arith::AddIOp::create(
          b, arith::MulIOp::create(b, chunk, k.index(kChunk / 16 * span)),
          span == 1 ? t : arith::MulIOp::create(b, t, k.index(span)).getResult());
      Value scales = k.arg(weightArg(r.matrix) + 1);
      if (span == 1)
        raw.push_back(memref::LoadOp::create(b, scales, ValueRange{expert, r.row, block}));
      else
        raw.push_back(vector::LoadOp::create(b, VectorType::get({span}, i8), scales,
                                             ValueRange{expert, r.row, block}, false,
                                             llvm::MaybeAlign(span)));
      return;
    }
    Value col = arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, k.index(kChunk)),
                                      arith::MulIOp::create(b, t, k.index(16)));
    Value values =
        vector::LoadOp::create(b, VectorType::get({16}, b.getBF16Type()), ref,
                               ValueRange{expert, r.row, col}, false, llvm::MaybeAlign(16));
    raw.push_back(vector::BitCastOp::create(b, VectorType::get({8}, i32), values));
  }

  // Thread (g, t) holds, per MMA tile, rows g (values 0, 1) and g + 8 (2,
  // 3) for the group's items 2 t (0, 2) and 2 t + 1 (1, 3).
  void store(ArrayRef<Value> sums, Value group) {
    Value one = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    for (int64_t col = 0; col < 2; ++col) {
      Value at = arith::AddIOp::create(
          b, group,
          arith::AddIOp::create(b, arith::MulIOp::create(b, t, k.index(2)), k.index(col)));
      auto ifItem = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, at, items), /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getThenRegion().front());
      Item it = item(arith::AddIOp::create(b, base, at));
      for (int64_t half = 0; half < 2; ++half) {
        if (p == Product::GateUp) {
          Value gate = sums[2 * half + col], up = sums[4 + 2 * half + col];
          if (s.nvfp4) {
            gate = arith::MulFOp::create(b, gate, globalScales[0]);
            up = arith::MulFOp::create(b, up, globalScales[1]);
          }
          Value h = kernels::swiGlu(b, gate, up, one);
          memref::StoreOp::create(b, h, k.arg(outArg()),
                                  ValueRange{it.token, it.choice, rows[half].row});
          continue;
        }
        for (int64_t tileOfWarp = 0; tileOfWarp < 2; ++tileOfWarp) {
          Value y = sums[4 * tileOfWarp + 2 * half + col];
          if (s.nvfp4)
            y = arith::MulFOp::create(b, y, globalScales[0]);
          memref::StoreOp::create(b, y, k.arg(outArg()),
                                  ValueRange{it.token, it.choice, rows[2 * tileOfWarp + half].row});
        }
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const ExpertTileShape &s;
  Product p;
  int64_t steps;
  Type i32;
  FloatType f32;
  Value expert, base, items, g, t;
  SmallVector<Row> rows; // gate/up: gate g, g + 8, up g, g + 8; down: g, g + 8, g + 16, g + 24
  SmallVector<Value> globalScales;
};

kernels::KernelSpec narrowGemm(const ExpertTileShape &s, Product p, int32_t nvfp4BlocksPerSm,
                               bool dropLastStep) {
  const std::string name =
      std::string(p == Product::GateUp ? "expert_gateup_narrow_" : "expert_down_narrow_") +
      (dropLastStep ? "broken_" : "") + kernels::expertShapeSuffix(s);
  const int64_t in = inDim(s, p), out = outDim(s, p);
  kernels::Tiling tiling;
  tiling.set("kind", p == Product::GateUp ? "mma-narrow-expert-gateup" : "mma-narrow-expert-down")
      .set("block", kBlock)
      .set("rows", kWarpRows)
      .set("items", kItems)
      .set("chunk", narrow::chunkColumns(in, s.nvfp4))
      .set("chunks_per_step", chunksPerStep(s, p))
      .set("weights", s.nvfp4 ? "nvfp4" : "bf16");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    std::vector<Type> types = {p == Product::GateUp
                                   ? Type(MemRefType::get({dynamic, in}, b.getF32Type()))
                                   : Type(MemRefType::get({dynamic, s.k, in}, b.getF32Type()))};
    kernels::appendExpertListTypes(b, s, types);
    for (int64_t m = 0; m < matrices(p); ++m)
      kernels::appendProjectionTypes(b, s, out, in, types);
    types.push_back(MemRefType::get({dynamic, s.k, out}, b.getF32Type()));
    return types;
  };
  int64_t steps =
      in / (narrow::chunkColumns(in, s.nvfp4) * chunksPerStep(s, p)) - (dropLastStep ? 1 : 0);
  const int32_t blocksPerSm = s.nvfp4 ? nvfp4BlocksPerSm : 0;
  if (blocksPerSm > 0)
    tiling.set("blocks_per_sm", blocksPerSm);
  return kernels::buildKernel(name, "kiln.megamoe", tiling, args, [&](kernels::KernelScope &k) {
    if (blocksPerSm > 0)
      kernels::boundLaunch(k, kBlock, blocksPerSm);
    NarrowBuilder(k, s, p, steps).build();
  });
}

kernels::Work narrowWork(const ExpertTileShape &s, Product p) {
  int64_t threads = tileBound(s) * warpsPerTile(s, p) * 32;
  return kernels::Work{(threads + kBlock - 1) / kBlock * kBlock, 0, kBlock};
}

} // namespace

bool narrowExpertsFit(const ExpertTileShape &s) {
  return kernels::expertListsFit(s) && s.intermediate % kRows == 0 && s.latent % kWarpRows == 0 &&
         s.latent % kChunk == 0 && s.intermediate % kChunk == 0;
}

kernels::TargetHooks::MatrixExperts narrowExperts(const ExpertTileShape &s,
                                                  int32_t nvfp4BlocksPerSm, bool dropLastStep) {
  kernels::TargetHooks::MatrixExperts experts;
  experts.lists = kernels::expertLists(s);
  experts.listsWork = kernels::expertListsWork(s);
  experts.gateUp = narrowGemm(s, Product::GateUp, nvfp4BlocksPerSm, dropLastStep);
  experts.down = narrowGemm(s, Product::Down, nvfp4BlocksPerSm, false);
  experts.gateUpWork = narrowWork(s, Product::GateUp);
  experts.downWork = narrowWork(s, Product::Down);
  experts.metaWords = s.experts + 2;
  experts.tileWords = 2 * s.maxTiles();
  experts.itemWords = s.maxItems();
  return experts;
}

} // namespace kiln::nvptx
