#include "compiler/interpreter/WeightSource.h"

#include "compiler/interpreter/ReferenceOps.h"
#include "runtime/core/Float.h"
#include "runtime/quant/Mxfp4.h"
#include "runtime/safetensors/Checkpoint.h"

#include <cstring>
#include <stdexcept>

namespace kiln::interp {

CheckpointWeights::CheckpointWeights(const std::string &dir)
    : checkpoint(std::make_unique<Checkpoint>(Checkpoint::open(dir))) {}

CheckpointWeights::~CheckpointWeights() = default;

std::vector<std::string> CheckpointWeights::tensorNames() const {
  return checkpoint->tensorNames();
}

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
    throw InterpreterError("tensor '" + name + "' has dtype " + std::string(dtypeName(info.dtype)) +
                           ", which no kiln.weight reads");
  }
}

HostTensor MapWeights::load(const std::string &name) {
  auto it = tensors.find(name);
  if (it == tensors.end())
    throw InterpreterError("no weight named '" + name + "'");
  return it->second;
}

namespace {

bool stripSuffix(const std::string &name, const std::string &suffix, std::string &stem) {
  if (name.size() < suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  stem = name.substr(0, name.size() - suffix.size());
  return true;
}

} // namespace

HostTensor Mxfp4ConvertedWeights::load(const std::string &name) {
  std::string module;
  // ".weight_scale" and ".weight_scale_2" do not end in ".weight", nor
  // ".weight_scale_2" in ".weight_scale": at most one of these matches.
  const bool isPacked = stripSuffix(name, ".weight", module);
  const bool isScales = !isPacked && stripSuffix(name, ".weight_scale", module);
  const bool isGlobal = !isPacked && !isScales && stripSuffix(name, ".weight_scale_2", module);
  if (!isPacked && !isScales && !isGlobal)
    return source.load(name);

  const Converted *result;
  if (auto it = converted.find(module); it != converted.end()) {
    result = &it->second;
  } else {
    HostTensor weight = source.load(module + ".weight");
    if (!weight.isInt) // a BF16 (or F32) linear: not ours
      return isPacked ? weight : source.load(name);
    result = &convert(module, std::move(weight));
  }
  return isPacked ? result->packed : isScales ? result->scales : result->global;
}

const Mxfp4ConvertedWeights::Converted &Mxfp4ConvertedWeights::convert(const std::string &module,
                                                                       HostTensor packed) {
  HostTensor scales = source.load(module + ".weight_scale");
  HostTensor global = source.load(module + ".weight_scale_2");
  // [.., O, I/2] codes, [.., O, I/16] scales, one global per [O, I] matrix.
  const std::vector<int64_t> &shape = packed.shape;
  if (shape.size() < 2 || scales.isInt || global.isInt)
    throw InterpreterError("NVFP4 module '" + module + "': weight " + packed.shapeString() +
                           " is not a matrix of codes, or its scales are not floats");
  const int64_t cols = 2 * shape.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    rows *= shape[d];
  std::vector<int64_t> scaleShape = shape;
  scaleShape.back() = cols / 16;
  if (cols % 32 != 0 || scales.shape != scaleShape ||
      global.numElements() * shape[shape.size() - 2] != rows)
    throw InterpreterError("NVFP4 module '" + module + "': weight " + packed.shapeString() +
                           ", weight_scale " + scales.shapeString() + " and weight_scale_2 " +
                           global.shapeString() +
                           " are not one MXFP4-convertible matrix (in-dimension a multiple of "
                           "32) per global scale");

  // Decode with the interpreter's own op, so that what is requantised is
  // exactly what the unconverted run computes with.
  HostTensor values = nvfp4Dequant(packed, scales, global);
  Mxfp4Matrix mx;
  try {
    mx = quantizeMxfp4(values.f.data(), rows, cols);
  } catch (const std::invalid_argument &e) {
    throw InterpreterError("NVFP4 module '" + module + "': " + e.what());
  }

  Converted c;
  c.packed = HostTensor::ints(shape, std::vector<int32_t>(mx.packed.begin(), mx.packed.end()));
  // e2m1 * 2^k * 1 is exact in f32, as in dequantizeMxfp4.
  c.scales = HostTensor::floats(scaleShape);
  for (size_t k = 0; k < c.scales.f.size(); ++k)
    c.scales.f[k] = e8m0ToFloat(mx.scales[k / 2]);
  c.global = HostTensor::floats(global.shape, std::vector<float>(global.f.size(), 1.0f));
  return converted.emplace(module, std::move(c)).first->second;
}

} // namespace kiln::interp
