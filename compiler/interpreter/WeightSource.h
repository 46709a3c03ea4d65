// Where the interpreter's `kiln.weight` values come from: a safetensors
// checkpoint (decoded to f32, or i32 for integer dtypes), tensors that a
// test puts in a map, or another source's NVFP4 weights converted to MXFP4.
#pragma once

#include "compiler/interpreter/HostTensor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln {
class Checkpoint;
} // namespace kiln

namespace kiln::interp {

class WeightSource {
public:
  virtual ~WeightSource() = default;
  // The tensor called `name`; throws InterpreterError when absent.
  virtual HostTensor load(const std::string &name) = 0;
};

// Reads a checkpoint directory (or single file's directory) once, decodes on
// demand: BF16/F16/F32/F8_E4M3 to f32, U8/I32 to i32.
class CheckpointWeights : public WeightSource {
public:
  explicit CheckpointWeights(const std::string &dir);
  ~CheckpointWeights() override;
  HostTensor load(const std::string &name) override;
  std::vector<std::string> tensorNames() const;

private:
  std::unique_ptr<Checkpoint> checkpoint;
};

class MapWeights : public WeightSource {
public:
  std::map<std::string, HostTensor> tensors;
  HostTensor load(const std::string &name) override;
};

// `nvfp4Source` with every NVFP4 module X (X.weight loads as integers) run
// through MXFP4, the format AMD GPUs take: the matrix is requantised with
// nvfp4ToMxfp4 and served in the NVFP4 layout, so that kiln.nvfp4_dequant
// decodes exactly the MXFP4 values: X.weight = the MXFP4 codes (same
// packing), X.weight_scale = each 32-block's power-of-two scale as a float,
// repeated for the block's two 16-column halves, X.weight_scale_2 = 1. Every
// other tensor passes through. Each module is converted on first use and
// kept (all of them: this is for the interpreter's small models). Throws
// InterpreterError if a module's in-dimension is not a multiple of 32 or its
// three tensors do not fit together.
class Mxfp4ConvertedWeights : public WeightSource {
public:
  explicit Mxfp4ConvertedWeights(WeightSource &nvfp4Source) : source(nvfp4Source) {}
  HostTensor load(const std::string &name) override;

private:
  struct Converted {
    HostTensor packed, scales, global;
  };
  const Converted &convert(const std::string &module, HostTensor packed);

  WeightSource &source;
  std::map<std::string, Converted> converted;
};

} // namespace kiln::interp
