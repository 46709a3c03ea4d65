#include "targets/common/KernelSpec.h"

#include "targets/common/KernelBuilder.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::kernels {

namespace {

[[noreturn]] void generatorBug(const std::string &name, const char *what) {
  std::fprintf(stderr, "kiln: kernel '%s': %s\n", name.c_str(), what);
  std::abort();
}

} // namespace

KernelSpec textKernel(std::string name, std::string op, std::string mlir) {
  // The dictionary after "kiln.tiling = ": its braces do not nest.
  const std::string key = "kiln.tiling = ";
  size_t at = mlir.find(key);
  size_t end = at == std::string::npos ? at : mlir.find('}', at);
  if (end == std::string::npos)
    generatorBug(name, "its text has no kiln.tiling attribute");
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  auto tiling = llvm::dyn_cast_or_null<mlir::DictionaryAttr>(
      mlir::parseAttribute(mlir.substr(at + key.size(), end + 1 - at - key.size()), &context));
  if (!tiling)
    generatorBug(name, "its kiln.tiling is not a dictionary");
  std::string json = tilingJson(tiling);
  return KernelSpec{std::move(name), std::move(op), std::move(json), std::move(mlir)};
}

std::string fillTemplate(const std::string &text,
                         const std::map<std::string, std::string> &values) {
  std::string out;
  out.reserve(text.size() * 2);
  size_t at = 0;
  while (true) {
    size_t open = text.find("@@", at);
    if (open == std::string::npos)
      break;
    // "@@@name@@" is a literal '@' (an MLIR symbol) before a placeholder.
    while (open + 2 < text.size() && text[open + 2] == '@')
      ++open;
    size_t close = text.find("@@", open + 2);
    if (close == std::string::npos)
      break;
    out.append(text, at, open - at);
    std::string key = text.substr(open + 2, close - open - 2);
    auto it = values.find(key);
    if (it == values.end()) {
      std::fprintf(stderr, "kiln: kernel template has no value for @@%s@@\n", key.c_str());
      std::abort();
    }
    out += it->second;
    at = close + 2;
  }
  out.append(text, at, std::string::npos);
  return out;
}

} // namespace kiln::kernels
