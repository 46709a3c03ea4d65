#include "targets/common/SwiGlu.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace kiln::kernels {

using namespace mlir;

Value swiGlu(ImplicitLocOpBuilder &b, Value g, Value u, Value one) {
  Value e = math::ExpOp::create(b, arith::NegFOp::create(b, g));
  Value sig = arith::DivFOp::create(b, g, arith::AddFOp::create(b, one, e));
  return arith::MulFOp::create(b, sig, u);
}

} // namespace kiln::kernels
