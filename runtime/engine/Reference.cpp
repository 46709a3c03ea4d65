#include "runtime/engine/Reference.h"

#include "runtime/core/InputFile.h"

#include "runtime/core/AtomicFile.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/safetensors/NonFinite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

template <typename T> std::string join(const std::vector<T> &values) {
  std::ostringstream os;
  os.precision(9);
  for (size_t i = 0; i < values.size(); ++i)
    os << (i ? " " : "") << values[i];
  return os.str();
}

} // namespace

ReferenceStep greedyStep(const std::vector<float> &logits) {
  ReferenceStep step;
  if (logits.empty())
    return step;
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best])
      best = i;
  float second = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i)
    if (i != best)
      second = std::max(second, logits[i]);
  step.token = static_cast<int32_t>(best);
  step.margin = logits.size() > 1 ? logits[best] - second : 0.0f;
  return step;
}

void writeReference(const std::string &path, const Reference &reference) {
  // A reference of NaN logits would pass nothing and fail nothing usefully.
  if (std::string found = nonFiniteLogits(reference.logits.data(), reference.logits.size());
      !found.empty())
    throw RuntimeError(path + ": not written: " + found);
  std::ostringstream os;
  os.precision(9);
  os << "kiln-reference 1\n";
  os << "source " << reference.source << "\n";
  os << "prompt " << join(reference.prompt) << "\n";
  os << "logits " << join(reference.logits) << "\n";
  for (size_t s = 0; s < reference.steps.size(); ++s) {
    const ReferenceStep &step = reference.steps[s];
    os << "step " << step.token << " " << step.margin << "\n";
    if (step.logits.empty())
      continue;
    if (std::string found = nonFiniteLogits(step.logits.data(), step.logits.size()); !found.empty())
      throw RuntimeError(path + ": not written: step " + std::to_string(s) + ": " + found);
    os << "step_logits " << join(step.logits) << "\n";
  }
  writeFileAtomically(path, os.str());
}

Reference readReference(const std::string &path) {
  if (std::string problem = inputFileProblem(path); !problem.empty())
    throw RuntimeError(path + ": cannot open the reference: " + problem);
  // A reference holds a row of logits: 16 bytes a token of even a large
  // vocabulary, well under this bound.
  std::istringstream in;
  try {
    in.str(readInputFile(path, uint64_t{1} << 30, "a reference"));
  } catch (const std::runtime_error &error) {
    throw RuntimeError(std::string("cannot open the reference: ") + error.what());
  }
  Reference reference;
  std::string line;
  int number = 0;
  auto bad = [&](const std::string &why) {
    return RuntimeError(path + ":" + std::to_string(number) + ": " + why);
  };
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (number == 1) {
      int version = 0;
      if (key != "kiln-reference" || !(fields >> version) || version != 1)
        throw bad("not a kiln reference (expected 'kiln-reference 1')");
    } else if (key == "source") {
      std::getline(fields >> std::ws, reference.source);
    } else if (key == "prompt") {
      for (int32_t t; fields >> t;)
        reference.prompt.push_back(t);
    } else if (key == "logits") {
      for (float v; fields >> v;)
        reference.logits.push_back(v);
    } else if (key == "step") {
      ReferenceStep step;
      if (!(fields >> step.token >> step.margin))
        throw bad("a step is a token and a margin");
      reference.steps.push_back(step);
    } else if (key == "step_logits") {
      if (reference.steps.empty() || !reference.steps.back().logits.empty())
        throw bad("step_logits follows its step, once");
      std::vector<float> &logits = reference.steps.back().logits;
      for (float v; fields >> v;)
        logits.push_back(v);
      if (logits.size() != reference.logits.size())
        throw bad("a step's logits are " + std::to_string(logits.size()) +
                  " values; the prompt's " + std::to_string(reference.logits.size()));
    } else if (!key.empty()) {
      throw bad("unknown field '" + key + "'");
    }
  }
  if (reference.prompt.empty() || reference.logits.empty())
    throw RuntimeError(path + ": a reference needs a prompt and its logits");
  return reference;
}

} // namespace kiln
