// Programmatic dependent launch (Hopper on): every kernel of an NVPTX module
// begins by waiting for the grid launched before it (griddepcontrol.wait:
// that grid complete, its writes visible) and then lets the grid after it
// launch (griddepcontrol.launch_dependents). Launched as usual the wait
// returns at once; launched with the programmatic stream serialization
// attribute (the runtime's choice, Target.kernels_wait_for_prior_grid), a
// kernel's blocks are scheduled while the one before it drains, so the gap
// between two kernels of a decode step (its launch, its first wave) hides
// behind the previous kernel's last wave.
#pragma once

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace kiln::nvptx {

// Puts the wait and the trigger at the entry of every gpu.func kernel.
void waitForPriorGrid(mlir::ModuleOp module);

} // namespace kiln::nvptx
