// What each pass of a pipeline did, read off the IR: the change in the count
// of every op kind between before and after the pass ("+8 kiln.norm_residual,
// -8 kiln.mul, ..."). Needs nothing from the passes themselves, so it is
// true for any pass a user adds.
#pragma once

#include "mlir/Pass/PassInstrumentation.h"

#include <map>
#include <string>
#include <vector>

namespace kiln {

struct PassEffect {
  std::string pass;                    // the pass's argument ("kiln-shard")
  std::map<std::string, long> opDelta; // op name -> change in count, nonzero only
};

class PassEffectsRecorder : public mlir::PassInstrumentation {
public:
  explicit PassEffectsRecorder(std::vector<PassEffect> &effects) : effects(effects) {}
  void runBeforePass(mlir::Pass *pass, mlir::Operation *op) override;
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override;

private:
  std::vector<PassEffect> &effects;
  std::map<std::string, long> before;
};

// "kiln-shard: +48 shard.all_slice, +8 shard.all_reduce" or "kiln-shard: no change".
std::string describe(const PassEffect &effect);

} // namespace kiln
