#include "targets/common/Generators.h"

#include <cstdio>

namespace kiln::kernels {

std::string partRange(const std::string &n, const std::string &p) {
  return fillTemplate(R"(
    %@@p@@part = arith.index_cast %part : i64 to index
    %@@p@@parts = arith.index_cast %parts : i64 to index
    %@@p@@one = arith.constant 1 : index
    %@@p@@sum = arith.addi @@n@@, %@@p@@parts : index
    %@@p@@sum1 = arith.subi %@@p@@sum, %@@p@@one : index
    %@@p@@chunk = arith.divui %@@p@@sum1, %@@p@@parts : index
    %@@p@@b0 = arith.muli %@@p@@part, %@@p@@chunk : index
    %@@p@@begin = arith.minui %@@p@@b0, @@n@@ : index
    %@@p@@e0 = arith.addi %@@p@@begin, %@@p@@chunk : index
    %@@p@@end = arith.minui %@@p@@e0, @@n@@ : index
)",
                      {{"n", n}, {"p", p}});
}

std::string ropeAngle() {
  return R"(
      %j64 = arith.index_cast %j : index to i64
      %jf = arith.sitofp %j64 : i64 to f64
      %e = arith.mulf %jf, %minus_two_over_d : f64
      %freq = math.powf %theta, %e : f64
      %angle = arith.mulf %p, %freq : f64
      %cd = math.cos %angle : f64
      %sd = math.sin %angle : f64
      %c = arith.truncf %cd : f64 to f32
      %s = arith.truncf %sd : f64 to f32
      %j2 = arith.addi %j, %half : index
)";
}

std::string ropeRotate(const std::string &type) {
  return fillTemplate(R"(
        %x0 = memref.load %x[%t, %h, %j] : @@t3@@
        %x1 = memref.load %x[%t, %h, %j2] : @@t3@@
        %a = arith.mulf %x0, %c : f32
        %b = arith.mulf %x1, %s : f32
        %o0 = arith.subf %a, %b : f32
        %d = arith.mulf %x1, %c : f32
        %f = arith.mulf %x0, %s : f32
        %o1 = arith.addf %d, %f : f32
        memref.store %o0, %out[%t, %h, %j] : @@t3@@
        memref.store %o1, %out[%t, %h, %j2] : @@t3@@
)",
                      {{"t3", type}});
}

std::string epsSuffix(double eps) {
  return "_eps" + std::to_string(static_cast<long long>(eps * 1e9));
}

std::string floatLiteral(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17e", value);
  return text;
}

std::string lookupTable(const std::string &name, int count, float (*decode)(uint8_t)) {
  std::string values;
  for (int code = 0; code < count; ++code) {
    float v = decode(static_cast<uint8_t>(code));
    values += (code ? ", " : "") + (v != v ? std::string("0x7FC00000") : floatLiteral(v));
  }
  return "memref.global \"private\" constant @" + name + " : memref<" + std::to_string(count) +
         "xf32> = dense<[" + values + "]>\n";
}

} // namespace kiln::kernels
