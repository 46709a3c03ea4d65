// A reference run to check a runtime against: the prompt, the logits of its
// last token, then greedy steps, each the token the reference chose and its
// margin over the runner-up, and from the second step on the logits it chose
// from (the decode of the step before: a check compares them too, so that a
// decode kernel's error that moves logits without flipping a choice shows). Written by kiln-interp
// (the fp32 interpreter) or by kiln-check from a trusted runtime, read by kiln-check on another
// target. Text, one field a line, so that a person can read it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ReferenceStep {
  int32_t token = 0;   // the reference's greedy choice
  float margin = 0.0f; // its logit minus the runner-up's
  // The logits it was chosen from, where the writer kept them (empty for
  // the first step, chosen from the prompt's logits, and in older files).
  std::vector<float> logits;
};

struct Reference {
  std::string source; // who wrote it ("kiln-interp", "kiln-check x86")
  std::vector<int32_t> prompt;
  std::vector<float> logits; // of the prompt's last token
  std::vector<ReferenceStep> steps;
};

// Throws RuntimeError naming the file and line on any malformed content.
Reference readReference(const std::string &path);
// Written atomically.
void writeReference(const std::string &path, const Reference &reference);

// The greedy step for `logits`: argmax (lowest index on ties) and its margin.
ReferenceStep greedyStep(const std::vector<float> &logits);

} // namespace kiln
