// A tensor value of the reference interpreter: a shape and row-major data,
// f32 for every float type (the interpreter computes in fp32) or i32 for
// integer tensors (token ids, positions, expert indices, packed NVFP4 bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::interp {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> f;   // float tensors
  std::vector<int32_t> i; // integer tensors
  bool isInt = false;

  static HostTensor floats(std::vector<int64_t> shape, std::vector<float> data = {});
  static HostTensor ints(std::vector<int64_t> shape, std::vector<int32_t> data = {});

  int64_t numElements() const;
  int64_t dim(int64_t d) const { return shape[d < 0 ? shape.size() + d : d]; }
  std::string shapeString() const;
};

} // namespace kiln::interp
