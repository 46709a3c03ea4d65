#include "compiler/pipeline/PassEffects.h"

#include "mlir/IR/Operation.h"
#include "mlir/Pass/Pass.h"

namespace kiln {
namespace {

std::map<std::string, long> countOps(mlir::Operation *root) {
  std::map<std::string, long> counts;
  root->walk([&](mlir::Operation *op) { ++counts[op->getName().getStringRef().str()]; });
  return counts;
}

} // namespace

void PassEffectsRecorder::runBeforePass(mlir::Pass *, mlir::Operation *op) {
  before = countOps(op);
}

void PassEffectsRecorder::runAfterPass(mlir::Pass *pass, mlir::Operation *op) {
  PassEffect effect;
  effect.pass = pass->getArgument().str();
  std::map<std::string, long> after = countOps(op);
  for (const auto &[name, count] : after)
    if (long delta = count - (before.count(name) ? before.at(name) : 0))
      effect.opDelta[name] = delta;
  for (const auto &[name, count] : before)
    if (!after.count(name))
      effect.opDelta[name] = -count;
  effects.push_back(std::move(effect));
}

std::string describe(const PassEffect &effect) {
  std::string line = effect.pass + ":";
  if (effect.opDelta.empty())
    return line + " no change";
  bool first = true;
  // Additions first, then removals, each in op-name order.
  for (bool adds : {true, false})
    for (const auto &[name, delta] : effect.opDelta)
      if ((delta > 0) == adds) {
        line += (first ? " " : ", ") + std::string(delta > 0 ? "+" : "") + std::to_string(delta) +
                " " + name;
        first = false;
      }
  return line;
}

} // namespace kiln
