#include "compiler/interpreter/WeightSource.h"

#include "compiler/interpreter/ReferenceOps.h"
#include "runtime/core/Float.h"
#include "runtime/safetensors/Checkpoint.h"

#include <cstring>

namespace kiln::interp {

CheckpointWeights::CheckpointWeights(const std::string &dir)
    : checkpoint(std::make_unique<Checkpoint>(Checkpoint::open(dir))) {}

CheckpointWeights::~CheckpointWeights() = default;

HostTensor CheckpointWeights::load(const std::string &name) {
  CheckpointTensor tensor = checkpoint->find(name);
  if (!tensor)
    throw InterpreterError("checkpoint " + checkpoint->directory() + " has no tensor '" + name +
                           "'");
  const TensorInfo &info = *tensor.info;
  int64_t n = info.numElements();
  const uint8_t *bytes = tensor.bytes.data;
  auto read16 = [&](int64_t k) {
    uint16_t v;
    std::memcpy(&v, bytes + 2 * k, 2);
    return v;
  };
  switch (info.dtype) {
  case DType::U8: {
    HostTensor t = HostTensor::ints(info.shape);
    for (int64_t k = 0; k < n; ++k)
      t.i[k] = bytes[k];
    return t;
  }
  case DType::I32: {
    HostTensor t = HostTensor::ints(info.shape);
    std::memcpy(t.i.data(), bytes, 4 * n);
    return t;
  }
  case DType::F32: {
    HostTensor t = HostTensor::floats(info.shape);
    std::memcpy(t.f.data(), bytes, 4 * n);
    return t;
  }
  case DType::BF16:
  case DType::F16:
  case DType::F8_E4M3: {
    HostTensor t = HostTensor::floats(info.shape);
    for (int64_t k = 0; k < n; ++k)
      t.f[k] = info.dtype == DType::BF16  ? bf16ToFloat(read16(k))
               : info.dtype == DType::F16 ? f16ToFloat(read16(k))
                                          : e4m3ToFloat(bytes[k]);
    return t;
  }
  default:
    throw InterpreterError("tensor '" + name + "' has dtype " +
                           std::string(dtypeName(info.dtype)) +
                           ", which no kiln.weight reads");
  }
}

HostTensor MapWeights::load(const std::string &name) {
  auto it = tensors.find(name);
  if (it == tensors.end())
    throw InterpreterError("no weight named '" + name + "'");
  return it->second;
}

} // namespace kiln::interp
