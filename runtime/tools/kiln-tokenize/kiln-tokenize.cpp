// kiln-tokenize: text to token ids and back with a checkpoint's tokenizer
// (runtime/text/Tokenizer.h).
#include "runtime/core/FlagValue.h"
#include "runtime/core/InputFile.h"
#include "runtime/core/QuoteName.h"
#include "runtime/core/StrictJson.h"
#include "runtime/text/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char *kUsage =
    R"(usage: kiln-tokenize TOKENIZER (--text TEXT | --file PATH | --texts-json PATH | --decode IDS |
                     --chat-json PATH | --info) [--no-special]

TOKENIZER is a folder holding tokenizer.json (and tokenizer_config.json, for
the BOS and EOS tokens), or a tokenizer.json: byte-level BPE as Llama 3/4 and
Muse Spark checkpoints ship it.

  --text TEXT          prints the ids of TEXT, a JSON array
  --file PATH          prints the ids of the file's text (UTF-8)
  --texts-json PATH    a JSON array of texts: prints a line for each,
                       {"ids": [...], "decoded": "...", "skipped": "..."}: its
                       ids, their text with special tokens and without
  --decode IDS         prints the text of IDS (1,2,3)
  --chat-json PATH     a JSON array of {"messages": [...],
                       "add_generation_prompt": bool, "extra": {...}}:
                       prints a line for each, {"text": ..., "ids": [...]}
                       (the chat template's text and its ids), or
                       {"error": ...} where the template refuses it
  --no-special         encode without the post-processor's special tokens
                       (Llama's BOS); decode without special tokens
  --info               prints the vocabulary size, BOS and EOS
  --help               this text
)";

// A text or JSON file of the user's, whole (at most 1 GiB).
std::string readText(const std::string &path) {
  return kiln::readInputFile(path, uint64_t{1} << 30, "a text to tokenize");
}

std::vector<int32_t> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view piece = std::string_view(text).substr(at, comma - at);
    const std::optional<int32_t> id =
        kiln::integerIn<int32_t>(piece, 0, std::numeric_limits<int32_t>::max());
    if (!id)
      throw std::runtime_error("--decode: " + kiln::quoteName(piece) +
                               " is not a token id (expected 1,2,3)");
    ids.push_back(*id);
    at = comma + 1;
  }
  return ids;
}

std::string idsJson(const std::vector<int32_t> &ids) { return nlohmann::json(ids).dump(); }

int run(const std::vector<std::string> &args) {
  std::string tokenizerPath, mode, value;
  bool special = true;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--no-special") {
      special = false;
    } else if (arg == "--info") {
      mode = arg;
    } else if (arg == "--text" || arg == "--file" || arg == "--texts-json" || arg == "--decode" ||
               arg == "--chat-json") {
      if (i + 1 >= args.size())
        throw std::runtime_error(arg + " needs a value");
      if (!mode.empty())
        throw std::runtime_error(arg + ": give one of --text, --file, --texts-json, --decode, "
                                       "--chat-json");
      mode = arg;
      value = args[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      throw std::runtime_error("unknown option " + arg + " (see --help)");
    } else if (tokenizerPath.empty()) {
      tokenizerPath = arg;
    } else {
      throw std::runtime_error("one tokenizer only (" + kiln::quoteName(arg) + " is a second)");
    }
  }
  if (tokenizerPath.empty() || mode.empty())
    throw std::runtime_error("give a tokenizer and what to do (see --help)");
  const auto tokenizer = kiln::text::Tokenizer::load(tokenizerPath);
  if (mode == "--info") {
    std::cout << "vocabulary: " << tokenizer->idLimit() << " ids\n";
    if (tokenizer->bos())
      std::cout << "bos: " << *tokenizer->bos() << "\n";
    if (tokenizer->eos())
      std::cout << "eos: " << *tokenizer->eos() << "\n";
  } else if (mode == "--text") {
    std::cout << idsJson(tokenizer->encode(value, special)) << "\n";
  } else if (mode == "--file") {
    std::cout << idsJson(tokenizer->encode(readText(value), special)) << "\n";
  } else if (mode == "--decode") {
    std::cout << tokenizer->decode(parseIds(value), !special);
  } else if (mode == "--chat-json") {
    const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(readText(value));
    if (!cases.is_array())
      throw std::runtime_error(value + ": expected a JSON array of chats");
    for (const nlohmann::ordered_json &chat : cases) {
      nlohmann::ordered_json line;
      try {
        const std::string text = tokenizer->applyChatTemplate(
            chat.at("messages"), chat.value("add_generation_prompt", false),
            chat.value("extra", nlohmann::ordered_json::object()));
        line["text"] = text;
        line["ids"] = tokenizer->encode(text, /*addSpecialTokens=*/false);
      } catch (const kiln::text::jinja::TemplateError &error) {
        line["error"] = error.what();
      }
      std::cout << line.dump() << "\n";
    }
  } else {
    const nlohmann::json texts = kiln::parseStrictJson(readText(value), value);
    if (!texts.is_array())
      throw std::runtime_error(value + ": expected a JSON array of texts");
    for (const nlohmann::json &text : texts) {
      if (!text.is_string())
        throw std::runtime_error(value + ": expected a JSON array of texts");
      const std::vector<int32_t> ids = tokenizer->encode(text.get<std::string>(), special);
      nlohmann::json line = {{"ids", ids},
                             {"decoded", tokenizer->decode(ids, false)},
                             {"skipped", tokenizer->decode(ids, true)}};
      std::cout << line.dump() << "\n";
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception &error) {
    std::cerr << "kiln-tokenize: " << error.what() << "\n";
    return 1;
  }
}
