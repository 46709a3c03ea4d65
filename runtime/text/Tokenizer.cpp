#include "runtime/text/Tokenizer.h"

#include "runtime/core/InputFile.h"
#include "runtime/core/QuoteName.h"
#include "runtime/core/StrictJson.h"
#include "runtime/text/ByteLevel.h"
#include "runtime/text/Utf8.h"
#include "runtime/text/jinja/Render.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <sys/stat.h>

namespace kiln::text {
namespace {

using json = nlohmann::json;

// GPT-2's pattern, which ByteLevel splits by where its use_regex is true.
constexpr const char *kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Larger files than any tokenizer (Llama 4's is 27 MB).
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

[[noreturn]] void fail(const std::string &where, const std::string &what) {
  throw std::runtime_error(where + ": " + what);
}

json readJson(const std::string &path) {
  return parseStrictJson(readInputFile(path, kMaxFileBytes, "a tokenizer file"), path);
}

// The field `key` of `object` (at `where`) as a `T`, or `fallback` where it
// is absent or null.
template <typename T>
T optionalField(const json &object, const char *key, T fallback, const std::string &where) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null())
    return fallback;
  try {
    return found->get<T>();
  } catch (const json::exception &) {
    fail(where + "." + key, std::string("expected ") +
                                (std::is_same_v<T, bool>          ? "true or false"
                                 : std::is_same_v<T, std::string> ? "a string"
                                                                  : "a number") +
                                ", found " + found->type_name());
  }
}

const json &requiredField(const json &object, const char *key, const std::string &where) {
  if (!object.is_object())
    fail(where, std::string("expected an object, found ") + object.type_name());
  const auto found = object.find(key);
  if (found == object.end())
    fail(where, std::string("no field '") + key + "'");
  return *found;
}

std::string typeOf(const json &object, const std::string &where) {
  const json &type = requiredField(object, "type", where);
  if (!type.is_string())
    fail(where + ".type", std::string("expected a string, found ") + type.type_name());
  return type.get<std::string>();
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> configToken(const json &config, const char *key,
                                       const std::string &where) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null())
    return std::nullopt;
  if (found->is_string())
    return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string())
    return (*found)["content"].get<std::string>();
  fail(where + "." + key, "expected a string or an object with a string 'content'");
}

bool isWordByte(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         (static_cast<unsigned char>(c) & 0x80);
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

} // namespace

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string &path) {
  struct stat info {};
  const bool folder = ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
  const std::string file = folder ? path + "/tokenizer.json" : path;
  std::string configFile;
  if (folder) {
    configFile = path + "/tokenizer_config.json";
  } else {
    const size_t slash = path.rfind('/');
    configFile = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
                 "tokenizer_config.json";
  }
  const json root = readJson(file);
  if (!root.is_object())
    fail(file, std::string("expected a JSON object, found ") + root.type_name());

  std::shared_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->source_ = file;

  // The model: byte-level BPE.
  const json &model = requiredField(root, "model", file);
  const std::string modelWhere = file + ": model";
  if (const std::string type = typeOf(model, modelWhere); type != "BPE")
    fail(modelWhere + ".type", "'" + type + "'; Kiln reads BPE models only");
  if (optionalField<bool>(model, "byte_fallback", false, modelWhere))
    fail(modelWhere + ".byte_fallback", "true; Kiln reads byte-level BPE (byte_fallback false)");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!optionalField<std::string>(model, key, "", modelWhere).empty())
      fail(modelWhere + "." + key, "set; Kiln reads byte-level BPE without one");
  const json &vocabJson = requiredField(model, "vocab", modelWhere);
  if (!vocabJson.is_object())
    fail(modelWhere + ".vocab", std::string("expected an object, found ") + vocabJson.type_name());
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocabJson.size());
  for (auto entry = vocabJson.begin(); entry != vocabJson.end(); ++entry) {
    if (!entry->is_number_integer() || entry->get<int64_t>() < 0 ||
        entry->get<int64_t>() >= (int64_t{1} << 31))
      fail(modelWhere + ".vocab[" + quoteName(entry.key()) + "]",
           "expected an id from 0 to 2^31 - 1");
    vocab.emplace_back(entry.key(), entry->get<int32_t>());
  }
  const json &mergesJson = requiredField(model, "merges", modelWhere);
  if (!mergesJson.is_array())
    fail(modelWhere + ".merges", std::string("expected an array, found ") + mergesJson.type_name());
  std::vector<BpeModel::Merge> merges;
  merges.reserve(mergesJson.size());
  for (size_t i = 0; i < mergesJson.size(); ++i) {
    const json &merge = mergesJson[i];
    const std::string where = modelWhere + ".merges[" + std::to_string(i) + "]";
    if (merge.is_string()) {
      // "left right": the halves hold no space (byte-level symbols).
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        fail(where, quoteName(text) + ", expected two symbols separated by one space");
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      fail(where, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  tokenizer->model_ = std::make_unique<BpeModel>(
      vocab, merges, optionalField<bool>(model, "ignore_merges", false, modelWhere), file);
  tokenizer->idLimit_ = tokenizer->model_->idLimit();

  // No normalizer: the text is tokenized as it is.
  if (const auto found = root.find("normalizer"); found != root.end() && !found->is_null())
    fail(file + ": normalizer",
         "'" + typeOf(*found, file + ": normalizer") +
             "'; Kiln reads tokenizers without a normalizer (as Llama 3 and 4 ship)");

  // The pre-tokenizer: Split and ByteLevel steps, alone or in a Sequence.
  const json &pre = requiredField(root, "pre_tokenizer", file);
  std::vector<const json *> steps;
  const std::string preWhere = file + ": pre_tokenizer";
  if (!pre.is_null() && typeOf(pre, preWhere) == "Sequence") {
    const json &list = requiredField(pre, "pretokenizers", preWhere);
    if (!list.is_array())
      fail(preWhere + ".pretokenizers", "expected an array");
    for (const json &step : list)
      steps.push_back(&step);
  } else if (!pre.is_null()) {
    steps.push_back(&pre);
  }
  bool byteLevel = false;
  for (size_t s = 0; s < steps.size(); ++s) {
    const json &step = *steps[s];
    const std::string where = steps.size() == 1 && &step == &pre
                                  ? preWhere
                                  : preWhere + ".pretokenizers[" + std::to_string(s) + "]";
    const std::string type = typeOf(step, where);
    PreTokenizerStep parsed;
    if (type == "Split") {
      const json &pattern = requiredField(step, "pattern", where);
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
        fail(where + ".pattern", "expected {\"Regex\": \"...\"}");
      if (const std::string behavior = optionalField<std::string>(step, "behavior", "", where);
          behavior != "Isolated")
        fail(where + ".behavior", "'" + behavior + "'; Kiln splits Isolated only");
      if (optionalField<bool>(step, "invert", false, where))
        fail(where + ".invert", "true; Kiln splits by matches (invert false) only");
      parsed.split =
          std::make_unique<PatternSplit>(pattern["Regex"].get<std::string>(), where + ".pattern");
    } else if (type == "ByteLevel") {
      parsed.byteLevel = byteLevel = true;
      parsed.addPrefixSpace = optionalField<bool>(step, "add_prefix_space", false, where);
      if (optionalField<bool>(step, "use_regex", true, where))
        parsed.split = std::make_unique<PatternSplit>(kGpt2Pattern, where + " (GPT-2's pattern)");
    } else {
      fail(where + ".type", "'" + type + "'; Kiln reads Split and ByteLevel pre-tokenizers");
    }
    tokenizer->preTokenizer_.push_back(std::move(parsed));
  }
  if (!byteLevel)
    fail(preWhere, "no ByteLevel step; Kiln reads byte-level BPE tokenizers");

  // The decoder: ByteLevel.
  const json &decoder = requiredField(root, "decoder", file);
  if (decoder.is_null() || typeOf(decoder, file + ": decoder") != "ByteLevel")
    fail(file + ": decoder",
         std::string(decoder.is_null() ? "null" : "'" + typeOf(decoder, file + ": decoder") + "'") +
             "; Kiln decodes ByteLevel only");

  // Added tokens.
  if (const auto found = root.find("added_tokens"); found != root.end() && !found->is_null()) {
    if (!found->is_array())
      fail(file + ": added_tokens", "expected an array");
    for (size_t i = 0; i < found->size(); ++i) {
      const json &entry = (*found)[i];
      const std::string where = file + ": added_tokens[" + std::to_string(i) + "]";
      AddedToken token;
      const json &id = requiredField(entry, "id", where);
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= (int64_t{1} << 31))
        fail(where + ".id", "expected an id from 0 to 2^31 - 1");
      token.id = id.get<int32_t>();
      token.content = optionalField<std::string>(entry, "content", "", where);
      if (token.content.empty())
        fail(where + ".content", "expected the token's text");
      if (const size_t bad = firstInvalidUtf8(token.content); bad != std::string::npos)
        fail(where + ".content", describeInvalidUtf8(token.content, bad));
      token.special = optionalField<bool>(entry, "special", false, where);
      token.lstrip = optionalField<bool>(entry, "lstrip", false, where);
      token.rstrip = optionalField<bool>(entry, "rstrip", false, where);
      token.singleWord = optionalField<bool>(entry, "single_word", false, where);
      tokenizer->idLimit_ = std::max(tokenizer->idLimit_, token.id + 1);
      tokenizer->added_.push_back(std::move(token));
    }
  }
  // Longest first: at one position the longest added token wins.
  std::stable_sort(
      tokenizer->added_.begin(), tokenizer->added_.end(),
      [](const AddedToken &a, const AddedToken &b) { return a.content.size() > b.content.size(); });
  tokenizer->byId_.assign(static_cast<size_t>(tokenizer->idLimit_), nullptr);
  for (const AddedToken &token : tokenizer->added_) {
    tokenizer->byId_[static_cast<size_t>(token.id)] = &token;
    tokenizer->byFirstByte_[static_cast<uint8_t>(token.content[0])].push_back(&token);
  }

  // The post-processor: a TemplateProcessing of one sequence (or none).
  if (const auto found = root.find("post_processor"); found != root.end() && !found->is_null()) {
    const std::string where = file + ": post_processor";
    const std::string type = typeOf(*found, where);
    if (type == "TemplateProcessing") {
      const json &single = requiredField(*found, "single", where);
      const json &specials = requiredField(*found, "special_tokens", where);
      if (!single.is_array())
        fail(where + ".single", "expected an array");
      bool sequence = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const std::string item = where + ".single[" + std::to_string(i) + "]";
        if (single[i].contains("Sequence")) {
          sequence = true;
          continue;
        }
        const json &special = requiredField(single[i], "SpecialToken", item);
        const std::string name =
            optionalField<std::string>(special, "id", "", item + ".SpecialToken");
        if (!specials.contains(name) || !specials[name].contains("ids") ||
            !specials[name]["ids"].is_array())
          fail(item, quoteName(name) + " is not in post_processor.special_tokens");
        for (const json &id : specials[name]["ids"]) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
              id.get<int64_t>() >= tokenizer->idLimit_)
            fail(where + ".special_tokens[" + quoteName(name) + "].ids",
                 "expected ids below " + std::to_string(tokenizer->idLimit_));
          (sequence ? tokenizer->suffix_ : tokenizer->prefix_).push_back(id.get<int32_t>());
        }
      }
    } else if (type != "ByteLevel") {
      fail(where + ".type", "'" + type + "'; Kiln reads TemplateProcessing and ByteLevel");
    }
  }

  // tokenizer_config.json, where there is one: BOS and EOS by name.
  if (inputFileProblem(configFile).empty()) {
    const json config = readJson(configFile);
    if (!config.is_object())
      fail(configFile, "expected a JSON object");
    const auto named = [&](const char *key, std::string *text) -> std::optional<int32_t> {
      const std::optional<std::string> name = configToken(config, key, configFile);
      if (!name)
        return std::nullopt;
      const std::optional<int32_t> id = tokenizer->tokenId(*name);
      if (!id)
        fail(configFile + ": " + key, quoteName(*name) + " is not a token of " + file);
      *text = *name;
      return id;
    };
    tokenizer->bos_ = named("bos_token", &tokenizer->bosText_);
    tokenizer->eos_ = named("eos_token", &tokenizer->eosText_);
    // The chat template: a string, or a list of {name, template}.
    std::string source;
    if (const auto found = config.find("chat_template"); found != config.end()) {
      if (found->is_string()) {
        source = found->get<std::string>();
      } else if (found->is_array()) {
        for (const json &entry : *found)
          if (entry.is_object() && entry.value("name", "") == "default" &&
              entry.contains("template") && entry["template"].is_string())
            source = entry["template"].get<std::string>();
        if (source.empty())
          fail(configFile + ": chat_template", "a list without a 'default' template");
      } else if (!found->is_null()) {
        fail(configFile + ": chat_template", "expected a string or a list of named templates");
      }
    }
    const std::string beside =
        configFile.substr(0, configFile.size() - std::string("tokenizer_config.json").size()) +
        "chat_template.jinja";
    if (source.empty() && inputFileProblem(beside).empty()) {
      source = readInputFile(beside, kMaxFileBytes, "a chat template");
    }
    if (!source.empty()) {
      try {
        tokenizer->chatTemplate_ = std::make_unique<jinja::Template>(
            jinja::parseTemplate(source, configFile + ": chat_template"));
      } catch (const jinja::TemplateError &error) {
        throw std::runtime_error(error.what());
      }
    }
  }
  return tokenizer;
}

std::string Tokenizer::applyChatTemplate(const nlohmann::ordered_json &messages,
                                         bool addGenerationPrompt,
                                         const nlohmann::ordered_json &extra) const {
  if (!chatTemplate_)
    throw std::runtime_error(source_ + ": the tokenizer has no chat template "
                                       "(tokenizer_config.json's chat_template)");
  jinja::Dict variables;
  variables.emplace_back("messages", jinja::Value::fromJson(messages));
  variables.emplace_back("add_generation_prompt", jinja::Value::of(addGenerationPrompt));
  variables.emplace_back("bos_token", jinja::Value::of(bosText_));
  variables.emplace_back("eos_token", jinja::Value::of(eosText_));
  // The first of a name wins: extra keys cannot replace these.
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      variables.emplace_back(it.key(), jinja::Value::fromJson(it.value()));
  return jinja::render(*chatTemplate_, jinja::Value::ofDict(std::move(variables)));
}

std::optional<int32_t> Tokenizer::tokenId(std::string_view token) const {
  for (const AddedToken &added : added_)
    if (added.content == token)
      return added.id;
  return model_->id(token);
}

bool Tokenizer::hasToken(int32_t id) const {
  return id >= 0 && id < idLimit_ && (byId_[static_cast<size_t>(id)] || model_->token(id));
}

bool Tokenizer::isSpecial(int32_t id) const {
  return id >= 0 && id < idLimit_ && byId_[static_cast<size_t>(id)] &&
         byId_[static_cast<size_t>(id)]->special;
}

void Tokenizer::encodeOrdinary(std::string_view text, std::vector<int32_t> &ids) const {
  if (text.empty())
    return;
  std::vector<std::string> pieces = {std::string(text)};
  for (const PreTokenizerStep &step : preTokenizer_) {
    std::vector<std::string> next;
    for (std::string &piece : pieces) {
      if (step.addPrefixSpace && (piece.empty() || piece[0] != ' '))
        piece.insert(piece.begin(), ' ');
      if (!step.split) {
        next.push_back(std::move(piece));
        continue;
      }
      for (std::string_view part : step.split->split(piece))
        next.emplace_back(part);
    }
    pieces = std::move(next);
  }
  for (const std::string &piece : pieces)
    model_->encodeWord(toByteLevel(piece), ids);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  if (const size_t bad = firstInvalidUtf8(text); bad != std::string::npos)
    throw std::runtime_error("the text to tokenize: " + describeInvalidUtf8(text, bad));
  std::vector<int32_t> ids;
  if (addSpecialTokens)
    ids = prefix_;
  // Cut at added tokens: at each position the longest one that may start
  // there (single_word ones only between words); lstrip and rstrip take the
  // whitespace beside them.
  size_t start = 0; // of the ordinary text not yet encoded
  for (size_t at = 0; at < text.size();) {
    const AddedToken *match = nullptr;
    for (const AddedToken *candidate : byFirstByte_[static_cast<uint8_t>(text[at])]) {
      const AddedToken &token = *candidate;
      if (text.compare(at, token.content.size(), token.content) != 0)
        continue;
      const size_t end = at + token.content.size();
      if (token.singleWord &&
          ((at > 0 && isWordByte(text[at - 1])) || (end < text.size() && isWordByte(text[end]))))
        continue;
      match = &token;
      break;
    }
    if (!match) {
      ++at;
      continue;
    }
    size_t before = at, after = at + match->content.size();
    if (match->lstrip)
      while (before > start && isSpace(text[before - 1]))
        --before;
    if (match->rstrip)
      while (after < text.size() && isSpace(text[after]))
        ++after;
    encodeOrdinary(text.substr(start, before - start), ids);
    ids.push_back(match->id);
    start = at = after;
  }
  encodeOrdinary(text.substr(start), ids);
  if (addSpecialTokens)
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string Tokenizer::tokenBytes(int32_t id, bool skipSpecialTokens) const {
  if (id < 0 || id >= idLimit_)
    throw std::runtime_error("token id " + std::to_string(id) + " is not in the vocabulary of " +
                             source_ + " (0.." + std::to_string(idLimit_ - 1) + ")");
  if (const AddedToken *added = byId_[static_cast<size_t>(id)]) {
    if (added->special && skipSpecialTokens)
      return std::string();
    return fromByteLevel(added->content);
  }
  const std::string *token = model_->token(id);
  if (!token)
    throw std::runtime_error("token id " + std::to_string(id) + " has no token in " + source_);
  return fromByteLevel(*token);
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids, bool skipSpecialTokens) const {
  Utf8Stream stream;
  std::string text;
  for (int32_t id : ids)
    text += stream.push(tokenBytes(id, skipSpecialTokens));
  return text + stream.finish();
}

} // namespace kiln::text
