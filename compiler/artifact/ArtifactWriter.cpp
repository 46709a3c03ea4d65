#include "compiler/artifact/ArtifactWriter.h"

#include "dialects/plan/PlanOps.h"
#include "runtime/artifact/ArtifactDigest.h"
#include "runtime/artifact/Version.h"
#include "runtime/artifact/kiln_artifact_generated.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Config/llvm-config.h"

#include <cstdint>

namespace kiln {
namespace {

namespace fb = ::flatbuffers;
namespace art = ::kiln::artifact;

art::DType dtypeOf(DType dtype) { return static_cast<art::DType>(dtype); }

art::DType dtypeOf(mlir::Type t) {
  if (t.isBF16())
    return art::DType::BF16;
  if (t.isF16())
    return art::DType::F16;
  if (t.isF32())
    return art::DType::F32;
  if (llvm::isa<mlir::Float8E4M3FNType>(t))
    return art::DType::F8_E4M3;
  if (t.isSignlessInteger(32))
    return art::DType::I32;
  if (t.isSignlessInteger(64))
    return art::DType::I64;
  if (t.isSignlessInteger(8) || t.isUnsignedInteger(8))
    return art::DType::U8;
  return art::DType::F64; // not produced by the x86 lowering; Artifact checks catch it
}

art::BufferKind bindingKind(llvm::StringRef kind) {
  if (kind == "weight")
    return art::BufferKind::Weight;
  if (kind == "kv")
    return art::BufferKind::KvCache;
  if (kind == "input")
    return art::BufferKind::Input;
  if (kind == "exchange")
    return art::BufferKind::Exchange;
  return art::BufferKind::Output;
}

class Writer {
public:
  Writer(const kernels::LoweredModel &model, const ArtifactInfo &info) : model(model), info(info) {}

  mlir::FailureOr<std::vector<uint8_t>> run(const std::vector<uint8_t> &library);

private:
  mlir::FailureOr<fb::Offset<art::BufferRef>> bufferRef(mlir::Value v, mlir::Operation *user);
  fb::Offset<fb::Vector<const art::Dim *>> dims(mlir::ArrayAttr shape);
  fb::Offset<art::TensorMap> tensorMap(llvm::StringRef spec);
  mlir::FailureOr<fb::Offset<art::EntryPoint>> entry(plan::EntryOp entry);

  const kernels::LoweredModel &model;
  const ArtifactInfo &info;
  fb::FlatBufferBuilder fbb{1 << 16};
  llvm::DenseMap<llvm::StringRef, uint32_t> kernelIndex;
};

fb::Offset<fb::Vector<const art::Dim *>> Writer::dims(mlir::ArrayAttr shape) {
  std::vector<art::Dim> out;
  for (mlir::Attribute a : shape) {
    auto d = llvm::cast<plan::DimAttr>(a);
    out.emplace_back(d.getConstant(), d.getPerToken(), d.getAlign());
  }
  return fbb.CreateVectorOfStructs(out);
}

// "B:X,Y[,...]:S" of a "tmap:" scalar (the plan verifier has checked it):
// buffer operand B, the box innermost first, swizzle S bytes.
fb::Offset<art::TensorMap> Writer::tensorMap(llvm::StringRef spec) {
  auto [buffer, rest] = spec.split(':');
  auto [box, swizzle] = rest.split(':');
  uint32_t index = 0, span = 0;
  buffer.getAsInteger(10, index);
  swizzle.getAsInteger(10, span);
  llvm::SmallVector<llvm::StringRef> sides;
  box.split(sides, ',');
  std::vector<uint32_t> elements;
  for (llvm::StringRef side : sides) {
    uint32_t value = 0;
    side.getAsInteger(10, value);
    elements.push_back(value);
  }
  return art::CreateTensorMap(fbb, index, fbb.CreateVector(elements), static_cast<uint8_t>(span));
}

mlir::FailureOr<fb::Offset<art::BufferRef>> Writer::bufferRef(mlir::Value v,
                                                              mlir::Operation *user) {
  mlir::ArrayAttr shape;
  mlir::Type elem;
  uint64_t offset = 0;
  mlir::Value root = v;
  // Views add their byte offset and give their own shape.
  if (auto view = root.getDefiningOp<plan::ViewOp>()) {
    shape = view.getShape();
    elem = view.getElementType();
    while (auto inner = root.getDefiningOp<plan::ViewOp>()) {
      offset += inner.getByteOffset();
      root = inner.getSource();
    }
  }
  if (auto alloc = root.getDefiningOp<plan::AllocOp>()) {
    if (!alloc.getOffset())
      return user->emitOpError() << "reads a buffer with no arena offset: run plan-assign-offsets";
    if (!shape) {
      shape = alloc.getShape();
      elem = alloc.getElementType();
    }
    return art::CreateBufferRef(fbb, art::BufferKind::Arena, 0, *alloc.getOffset() + offset,
                                dims(shape), dtypeOf(elem));
  }
  if (auto binding = root.getDefiningOp<plan::BindingOp>()) {
    if (!shape) {
      shape = binding.getShape();
      elem = binding.getElementType();
    }
    return art::CreateBufferRef(fbb, bindingKind(binding.getKind()), binding.getIndex(), offset,
                                dims(shape), dtypeOf(elem));
  }
  return user->emitOpError() << "reads a value that is not a plan buffer";
}

mlir::FailureOr<fb::Offset<art::EntryPoint>> Writer::entry(plan::EntryOp op) {
  std::vector<fb::Offset<art::StepEntry>> steps;
  art::Dim logitsRows(1, 0, 1);
  for (mlir::Operation &inner : op.getBody().front()) {
    if (auto launch = llvm::dyn_cast<plan::LaunchOp>(inner)) {
      std::vector<fb::Offset<art::BufferRef>> buffers;
      for (mlir::Value v : launch.getBuffers()) {
        auto ref = bufferRef(v, launch);
        if (mlir::failed(ref))
          return mlir::failure();
        buffers.push_back(*ref);
      }
      std::vector<fb::Offset<art::Scalar>> scalars;
      std::vector<fb::Offset<art::TensorMap>> tensorMaps;
      for (mlir::Attribute a : launch.getScalars()) {
        llvm::StringRef s = llvm::cast<mlir::StringAttr>(a).getValue();
        auto [kind, value] = s.split(':');
        if (kind == "tmap") {
          // A map of its own, which the scalar indexes.
          scalars.push_back(art::CreateScalar(fbb, art::ScalarKind::TensorMap,
                                              static_cast<int64_t>(tensorMaps.size())));
          tensorMaps.push_back(tensorMap(value));
          continue;
        }
        int64_t number = 0;
        value.getAsInteger(10, number);
        art::ScalarKind k = kind == "const"    ? art::ScalarKind::Constant
                            : kind == "tokens" ? art::ScalarKind::Tokens
                            : kind == "past"   ? art::ScalarKind::PastTokens
                            : kind == "group"  ? art::ScalarKind::GroupIndex
                            : kind == "seq"    ? art::ScalarKind::SequenceTokens
                            : kind == "part"   ? art::ScalarKind::Part
                                               : art::ScalarKind::Parts;
        scalars.push_back(art::CreateScalar(fbb, k, number));
      }
      art::Dim grid(0, 0, 1);
      if (plan::DimAttr g = launch.getGridAttr())
        grid = art::Dim(g.getConstant(), g.getPerToken(), g.getAlign());
      auto l = art::CreateLaunch(fbb, kernelIndex.lookup(launch.getKernel()),
                                 fbb.CreateVector(buffers), fbb.CreateVector(scalars),
                                 launch.getMaxParts(), fbb.CreateString(launch.getOp().str()),
                                 launch.getGridAttr() ? &grid : nullptr,
                                 static_cast<uint32_t>(launch.getBlock().value_or(0)),
                                 tensorMaps.empty() ? 0 : fbb.CreateVector(tensorMaps));
      steps.push_back(art::CreateStepEntry(fbb, art::Step::Launch, l.Union()));
    } else if (auto copy = llvm::dyn_cast<plan::CopyOp>(inner)) {
      auto src = bufferRef(copy.getSource(), copy);
      auto dst = bufferRef(copy.getDestination(), copy);
      if (mlir::failed(src) || mlir::failed(dst))
        return mlir::failure();
      auto c = art::CreateCopy(fbb, *src, *dst);
      steps.push_back(art::CreateStepEntry(fbb, art::Step::Copy, c.Union()));
    } else if (auto collective = llvm::dyn_cast<plan::CollectiveOp>(inner)) {
      auto src = bufferRef(collective.getSource(), collective);
      auto dst = bufferRef(collective.getDestination(), collective);
      if (mlir::failed(src) || mlir::failed(dst))
        return mlir::failure();
      llvm::StringRef kind = collective.getKind();
      auto c = art::CreateCollective(fbb,
                                     kind == "all_reduce"   ? art::CollectiveKind::AllReduce
                                     : kind == "all_gather" ? art::CollectiveKind::AllGather
                                                            : art::CollectiveKind::ReduceScatter,
                                     *src, *dst, 0, static_cast<int32_t>(collective.getAxis()),
                                     static_cast<uint32_t>(collective.getGroup()),
                                     fbb.CreateString(collective.getOp().str()));
      steps.push_back(art::CreateStepEntry(fbb, art::Step::Collective, c.Union()));
    } else if (auto binding = llvm::dyn_cast<plan::BindingOp>(inner);
               binding && binding.getKind() == "output") {
      auto d = llvm::cast<plan::DimAttr>(binding.getShape()[0]);
      logitsRows = art::Dim(d.getConstant(), d.getPerToken(), d.getAlign());
    }
  }
  return art::CreateEntryPoint(fbb, fbb.CreateString(op.getSymName().str()), op.getMaxTokens(),
                               op.getArenaBytes().value_or(0), fbb.CreateVector(steps), &logitsRows,
                               static_cast<uint32_t>(op.getSequences().value_or(0)),
                               static_cast<uint32_t>(op.getTokenSplit().value_or(0)),
                               static_cast<uint32_t>(op.getSequenceRows().value_or(0)));
}

mlir::FailureOr<std::vector<uint8_t>> Writer::run(const std::vector<uint8_t> &library) {
  std::vector<fb::Offset<art::Kernel>> kernels;
  for (const kernels::KernelSpec &k : model.kernels) {
    if (k.sharedBytes < 0 || k.sharedBytes > UINT32_MAX) {
      mlir::emitError(mlir::UnknownLoc::get(model.plan.get()->getContext()))
          << "kernel '" << k.name << "' needs " << k.sharedBytes
          << " bytes of dynamic shared memory, which an artifact cannot say";
      return mlir::failure();
    }
    kernelIndex[k.name] = static_cast<uint32_t>(kernels.size());
    kernels.push_back(art::CreateKernel(fbb, fbb.CreateString("kiln_" + k.name),
                                        fbb.CreateString(k.op), fbb.CreateString(k.tiling),
                                        static_cast<uint32_t>(k.sharedBytes)));
  }
  std::vector<fb::Offset<art::WeightBinding>> weights;
  for (const kernels::WeightInfo &w : model.weights)
    weights.push_back(art::CreateWeightBinding(
        fbb, fbb.CreateString(w.name), static_cast<uint32_t>(w.stack), 0, fbb.CreateVector(w.shape),
        dtypeOf(w.dtype),
        w.transform == kernels::Transform::VnniBf16 ? art::WeightTransform::VnniBf16
                                                    : art::WeightTransform::None,
        static_cast<int32_t>(w.sliceDim), static_cast<int32_t>(w.sliceCount),
        static_cast<uint64_t>(w.bytes), static_cast<int32_t>(w.sliceGroup)));
  std::vector<fb::Offset<art::KvCache>> caches;
  for (const kernels::KvCacheInfo &c : model.kvCaches)
    caches.push_back(art::CreateKvCache(fbb, c.layer, c.window, c.kvHeads, c.headDim,
                                        dtypeOf(c.dtype), static_cast<uint32_t>(c.ring),
                                        static_cast<uint32_t>(c.pageTokens)));
  std::vector<fb::Offset<art::EntryPoint>> entries;
  mlir::ModuleOp planModule = model.plan.get();
  for (auto op : planModule.getOps<plan::EntryOp>()) {
    auto e = entry(op);
    if (mlir::failed(e))
      return mlir::failure();
    entries.push_back(*e);
  }
  std::vector<fb::Offset<fb::String>> features;
  for (const std::string &f : info.features)
    features.push_back(fbb.CreateString(f));

  auto version = art::CreateVersion(fbb, art::kSchemaMajor, art::kSchemaMinor,
                                    fbb.CreateString(compilerVersion()));
  auto target = art::CreateTarget(
      fbb,
      info.targetKind == ArtifactInfo::Nvptx    ? art::TargetKind::NVPTX
      : info.targetKind == ArtifactInfo::Amdgcn ? art::TargetKind::AMDGCN
                                                : art::TargetKind::X86,
      fbb.CreateString(info.triple), fbb.CreateString(info.chip), fbb.CreateVector(features),
      info.memoryBytes, info.reserveBytes, info.kernelsWaitForPriorGrid);
  auto modelTable =
      art::CreateModel(fbb, fbb.CreateString(info.modelName), fbb.CreateString(info.configJson),
                       fbb.CreateString(info.weightFormat));
  auto layout = art::CreateLayout(fbb, info.tp, info.ep, info.sp, info.world);
  auto lib = art::CreateKernelLibrary(fbb, fbb.CreateString(info.libraryFormat),
                                      fbb.CreateVector(library));
  std::vector<fb::Offset<art::CommGroup>> groups;
  for (const kernels::CommGroupInfo &g : model.commGroups) {
    std::vector<int32_t> ranks(g.ranks.begin(), g.ranks.end());
    groups.push_back(art::CreateCommGroup(fbb, fbb.CreateString(g.name),
                                          static_cast<uint32_t>(g.size), fbb.CreateVector(ranks),
                                          static_cast<uint64_t>(g.exchangeBytes)));
  }
  const art::Digests unsealed(0, 0); // sealArtifact fills them in
  auto root = art::CreateArtifact(fbb, version, target, modelTable, layout, info.rank,
                                  fbb.CreateVector(weights), fbb.CreateVector(caches),
                                  fbb.CreateVector(kernels), lib, fbb.CreateVector(entries),
                                  groups.empty() ? 0 : fbb.CreateVector(groups), &unsealed);
  art::FinishArtifactBuffer(fbb, root);
  art::sealArtifact(fbb.GetBufferPointer(), fbb.GetSize());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

} // namespace

std::string compilerVersion() {
  return std::string("kilnc 0.1.0 (LLVM ") + LLVM_VERSION_STRING + ")";
}

mlir::FailureOr<std::vector<uint8_t>> serializeArtifact(const kernels::LoweredModel &model,
                                                        const std::vector<uint8_t> &library,
                                                        const ArtifactInfo &info) {
  return Writer(model, info).run(library);
}

} // namespace kiln
