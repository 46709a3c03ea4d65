// JSON from files a user hands us (configs, safetensors headers, checkpoint
// indexes, an artifact's config) parsed with two limits nlohmann's parser
// lacks: nesting is bounded (its dump and comparisons recurse, so 100,000
// nested arrays overflow the stack while an error message is built), and a
// key given twice in one object is refused (nlohmann keeps the last one
// silently).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

// Deeper nesting is valid in none of our files.
constexpr int kMaxJsonDepth = 32;

// "<source>: JSON nesting deeper than 32 levels", "<source>: duplicate key
// 'k' in the top-level object" (or "in the object of 'owner'").
struct StrictJsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses `text` as nlohmann::json::parse does, with the limits above. Every
// failure is a StrictJsonError: "<source>: not valid JSON at byte N: <why,
// cut to a readable length>" for what nlohmann refuses.
nlohmann::json parseStrictJson(std::string_view text, const std::string &source);

} // namespace kiln
