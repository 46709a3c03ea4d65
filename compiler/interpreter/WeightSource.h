// Where the interpreter's `kiln.weight` values come from: a safetensors
// checkpoint (decoded to f32, or i32 for integer dtypes), or tensors that a
// test puts in a map.
#pragma once

#include "compiler/interpreter/HostTensor.h"

#include <map>
#include <memory>
#include <string>

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

private:
  std::unique_ptr<Checkpoint> checkpoint;
};

class MapWeights : public WeightSource {
public:
  std::map<std::string, HostTensor> tensors;
  HostTensor load(const std::string &name) override;
};

} // namespace kiln::interp
