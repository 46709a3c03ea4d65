#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln::kernels {

using namespace mlir;

Tiling &Tiling::set(const std::string &key, int64_t value) {
  fields.emplace_back(key, value);
  return *this;
}

Tiling &Tiling::set(const std::string &key, const std::string &value) {
  fields.emplace_back(key, value);
  return *this;
}

Tiling &Tiling::set(const std::string &key, std::vector<int64_t> values) {
  fields.emplace_back(key, std::move(values));
  return *this;
}

DictionaryAttr Tiling::attr(Builder &b) const {
  SmallVector<NamedAttribute> named;
  for (const auto &[key, value] : fields) {
    Attribute attr;
    if (const auto *i = std::get_if<int64_t>(&value))
      attr = b.getI64IntegerAttr(*i);
    else if (const auto *text = std::get_if<std::string>(&value))
      attr = b.getStringAttr(*text);
    else
      attr = b.getI64ArrayAttr(std::get<std::vector<int64_t>>(value));
    named.push_back(b.getNamedAttr(key, attr));
  }
  return b.getDictionaryAttr(named);
}

namespace {

void appendJson(std::string &text, Attribute value) {
  if (auto i = llvm::dyn_cast<IntegerAttr>(value)) {
    text += std::to_string(i.getInt());
  } else if (auto str = llvm::dyn_cast<StringAttr>(value)) {
    text += "\"" + str.getValue().str() + "\"";
  } else if (auto array = llvm::dyn_cast<ArrayAttr>(value)) {
    text += "[";
    for (auto [n, element] : llvm::enumerate(array))
      appendJson(text += n ? ", " : "", element);
    text += "]";
  } else {
    std::string printed;
    llvm::raw_string_ostream os(printed);
    value.print(os);
    llvm::report_fatal_error(llvm::Twine("kiln.tiling holds ") + printed +
                             ", which the artifact's JSON does not take");
  }
}

} // namespace

std::string tilingJson(DictionaryAttr tiling) {
  std::string text = "{";
  for (auto [n, entry] : llvm::enumerate(tiling)) {
    text += (n ? ", \"" : "\"") + entry.getName().str() + "\": ";
    appendJson(text, entry.getValue());
  }
  return text + "}";
}

BlockArgument KernelScope::arg(unsigned i) const { return func.getArgument(i); }

Value KernelScope::index(int64_t value) const { return arith::ConstantIndexOp::create(b, value); }

Value KernelScope::i32(int64_t value) const { return arith::ConstantIntOp::create(b, value, 32); }

Value KernelScope::i64(int64_t value) const { return arith::ConstantIntOp::create(b, value, 64); }

Value KernelScope::argIndex(unsigned i) const {
  return arith::IndexCastOp::create(b, b.getIndexType(), arg(i));
}

KernelSpec buildKernel(const std::string &name, const std::string &op, const Tiling &tiling,
                       const std::function<std::vector<Type>(Builder &)> &args,
                       const std::function<void(KernelScope &)> &body) {
  MLIRContext context(MLIRContext::Threading::DISABLED);
  context.loadDialect<amx::AMXDialect, arith::ArithDialect, func::FuncDialect, gpu::GPUDialect,
                      LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                      NVVM::NVVMDialect, ROCDL::ROCDLDialect, scf::SCFDialect,
                      vector::VectorDialect, x86vector::X86VectorDialect>();
  ImplicitLocOpBuilder b(UnknownLoc::get(&context), &context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b);
  b.setInsertionPointToEnd(module->getBody());
  std::vector<Type> types = args(b);
  types.push_back(b.getI64Type()); // %part
  types.push_back(b.getI64Type()); // %parts
  auto fn = func::FuncOp::create(b, name, b.getFunctionType(types, {}));
  fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  fn->setAttr("kiln.tiling", tiling.attr(b));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  KernelScope scope{b, fn, *module};
  body(scope);
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b);

  std::string text;
  llvm::raw_string_ostream os(text);
  for (Operation &inner : *module->getBody()) {
    inner.print(os);
    os << "\n";
  }
  return KernelSpec{name, op, tilingJson(fn->getAttrOfType<DictionaryAttr>("kiln.tiling")), text};
}

void boundLaunch(KernelScope &k, int64_t threads, int32_t blocksPerSm) {
  k.func->setAttr("nvvm.maxntid", k.b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
  if (blocksPerSm > 0)
    k.func->setAttr("nvvm.minctasm", k.b.getI32IntegerAttr(blocksPerSm));
}

Value xorShuffleReduce(ImplicitLocOpBuilder &b, Value value, ArrayRef<int32_t> offsets,
                       function_ref<Value(Value, Value)> combine) {
  for (int32_t offset : offsets) {
    auto other = gpu::ShuffleOp::create(b, value, offset, 32, gpu::ShuffleMode::XOR);
    value = combine(value, other.getShuffleResult());
  }
  return value;
}

std::pair<Value, Value> partRange(ImplicitLocOpBuilder &b, Value count, Value part, Value parts) {
  Value one = arith::ConstantIndexOp::create(b, 1);
  Value chunk = arith::DivUIOp::create(
      b, arith::SubIOp::create(b, arith::AddIOp::create(b, count, parts), one), parts);
  Value begin = arith::MinUIOp::create(b, arith::MulIOp::create(b, part, chunk), count);
  Value end = arith::MinUIOp::create(b, arith::AddIOp::create(b, begin, chunk), count);
  return {begin, end};
}

Value forEachRowOfPart(KernelScope &k, Value count) {
  unsigned n = k.func.getNumArguments();
  auto [begin, end] = partRange(k.b, count, k.argIndex(n - 2), k.argIndex(n - 1));
  auto loop = scf::ForOp::create(k.b, begin, end, k.index(1));
  k.b.setInsertionPointToStart(loop.getBody());
  return loop.getInductionVar();
}

namespace {
template <typename T>
MemRefType constantTableOf(KernelScope &k, const std::string &name, FloatType element,
                           ArrayRef<T> values) {
  const int64_t count = static_cast<int64_t>(values.size());
  auto type = MemRefType::get({count}, element);
  OpBuilder::InsertionGuard guard(k.b);
  k.b.setInsertionPoint(k.func);
  memref::GlobalOp::create(k.b, name, k.b.getStringAttr("private"), type,
                           DenseElementsAttr::get(RankedTensorType::get({count}, element), values),
                           /*constant=*/true, IntegerAttr());
  return type;
}
} // namespace

MemRefType constantTable(KernelScope &k, const std::string &name, ArrayRef<float> values) {
  return constantTableOf(k, name, k.b.getF32Type(), values);
}

MemRefType constantTable(KernelScope &k, const std::string &name, ArrayRef<double> values) {
  return constantTableOf(k, name, k.b.getF64Type(), values);
}

SharedBuffer declareSharedBuffer(KernelScope &k, const std::string &name, ArrayRef<int64_t> shape,
                                 Type element) {
  MLIRContext *context = k.b.getContext();
  SharedBuffer buffer{
      MemRefType::get(shape, element, MemRefLayoutAttrInterface(),
                      gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup)),
      name};
  OpBuilder::InsertionGuard guard(k.b);
  k.b.setInsertionPoint(k.func);
  memref::GlobalOp::create(k.b, name, k.b.getStringAttr("private"), buffer.type, Attribute(),
                           /*constant=*/false, IntegerAttr());
  return buffer;
}

Value SharedBuffer::get(ImplicitLocOpBuilder &b) const {
  return memref::GetGlobalOp::create(b, type, name);
}

MemRefType decodeTable(KernelScope &k, const std::string &name, int count,
                       float (*decode)(uint8_t)) {
  std::vector<float> values;
  for (int code = 0; code < count; ++code) {
    float v = decode(static_cast<uint8_t>(code));
    values.push_back(v != v ? std::numeric_limits<float>::quiet_NaN() : v);
  }
  return constantTable(k, name, values);
}

WarpOfPart warpOfPart(KernelScope &k) {
  WarpOfPart w;
  w.c0 = k.index(0);
  w.c1 = k.index(1);
  w.c32 = k.index(32);
  unsigned n = k.func.getNumArguments();
  Value part = k.argIndex(n - 2), parts = k.argIndex(n - 1);
  w.lane = arith::RemUIOp::create(k.b, part, w.c32);
  w.warp = arith::DivUIOp::create(k.b, part, w.c32);
  w.warps = arith::DivUIOp::create(k.b, parts, w.c32);
  return w;
}

} // namespace kiln::kernels
