#include "runtime/core/StrictJson.h"

#include "runtime/core/QuoteName.h"

#include <nlohmann/json.hpp>

#include <unordered_set>
#include <vector>

namespace kiln {

using json = nlohmann::json;

json parseStrictJson(std::string_view text, const std::string &source) {
  // One key set per open object; `owner` names the key the object sits under.
  struct OpenObject {
    std::unordered_set<std::string> keys;
    std::string owner;
  };
  std::vector<OpenObject> objects;
  std::string lastKey;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json &parsed) {
    switch (event) {
    case json::parse_event_t::object_start:
    case json::parse_event_t::array_start:
      if (depth >= kMaxJsonDepth)
        throw StrictJsonError(source + ": JSON nesting deeper than " +
                              std::to_string(kMaxJsonDepth) + " levels");
      if (event == json::parse_event_t::object_start)
        objects.push_back({{}, objects.empty() ? std::string() : lastKey});
      break;
    case json::parse_event_t::object_end:
      objects.pop_back();
      break;
    case json::parse_event_t::key: {
      lastKey = parsed.get<std::string>();
      if (!objects.back().keys.insert(lastKey).second) {
        const std::string &owner = objects.back().owner;
        throw StrictJsonError(source + ": duplicate key " + quoteName(lastKey) +
                              (objects.size() == 1 ? std::string(" in the top-level object")
                                                   : " in the object of " + quoteName(owner)));
      }
      break;
    }
    default:
      break;
    }
    return true;
  };
  // nlohmann's messages quote the token they stopped at, however long (a
  // number of 50 MB digits): the reason is cut to a readable length.
  const auto cut = [](const std::string &reason) { return printableText(reason, 240); };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error &error) {
    throw StrictJsonError(source + ": not valid JSON at byte " + std::to_string(error.byte) + ": " +
                          cut(error.what()));
  } catch (const json::exception &error) {
    // A number past what 64 bits or a double hold, and the like.
    throw StrictJsonError(source + ": not valid JSON: " + cut(error.what()));
  }
}

} // namespace kiln
