// Text in and out of token ids, from a Hugging Face tokenizer folder
// (tokenizer.json, and tokenizer_config.json where there is one): byte-level
// BPE as Llama 3/4 and GPT-2 style checkpoints ship it.
//
// encode: the text is cut at added tokens (tokenizer.json's added_tokens,
// special or not, leftmost and longest first, with their lstrip, rstrip and
// single_word rules); each other run is pre-tokenized (Split by a pattern,
// then ByteLevel: PatternSplit.h, ByteLevel.h), each piece encoded by the BPE
// model (BpeModel.h), and the post-processor's template adds its special
// tokens (the BOS of Llama's). decode: the ByteLevel decoder, special tokens
// kept or skipped.
//
// What the file holds beyond this (another model, normalizer, pre-tokenizer
// or decoder type) is refused at load, naming the field and what is
// supported, rather than tokenized differently from the checkpoint's own
// tokenizer.
#pragma once

#include "runtime/text/BpeModel.h"
#include "runtime/text/PatternSplit.h"
#include "runtime/text/jinja/Ast.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false, singleWord = false;
};

class Tokenizer {
public:
  // `path` is a folder holding tokenizer.json (and maybe
  // tokenizer_config.json), or a tokenizer.json. Throws std::runtime_error
  // "<file>: <field>: ..." for what cannot be read or is not supported.
  static std::shared_ptr<const Tokenizer> load(const std::string &path);

  // The ids of `text` (UTF-8; anything else is refused, naming the byte),
  // with the post-processor's special tokens when `addSpecialTokens`.
  std::vector<int32_t> encode(std::string_view text, bool addSpecialTokens = true) const;
  // The text of `ids`; ids past the vocabulary are refused.
  std::string decode(const std::vector<int32_t> &ids, bool skipSpecialTokens = false) const;
  // The bytes `id` decodes to (empty for a special token when skipped), for
  // streaming through a Utf8Stream.
  std::string tokenBytes(int32_t id, bool skipSpecialTokens = false) const;

  std::optional<int32_t> tokenId(std::string_view token) const;
  // Whether `id` (below idLimit()) has a token: ids may have gaps.
  bool hasToken(int32_t id) const;
  bool isSpecial(int32_t id) const;
  // One past the largest id of the vocabulary and the added tokens.
  int32_t idLimit() const { return idLimit_; }
  // tokenizer_config.json's bos_token and eos_token, where it names them.
  std::optional<int32_t> bos() const { return bos_; }
  std::optional<int32_t> eos() const { return eos_; }
  const std::string &source() const { return source_; }

  // The checkpoint's chat template (tokenizer_config.json's chat_template,
  // its "default" where it names several, or chat_template.jinja beside
  // it), rendered as Hugging Face's apply_chat_template renders it (Jinja2
  // with trim_blocks and lstrip_blocks: jinja/Render.h) with `messages`,
  // add_generation_prompt, bos_token, eos_token and `extra`'s keys (tools,
  // ...). The text is tokenized without the post-processor's tokens (the
  // template writes its own BOS). Throws std::runtime_error where there is
  // no template, and jinja::TemplateError for what the template refuses.
  bool hasChatTemplate() const { return chatTemplate_ != nullptr; }
  std::string applyChatTemplate(const nlohmann::ordered_json &messages, bool addGenerationPrompt,
                                const nlohmann::ordered_json &extra) const;

private:
  Tokenizer() = default;
  // Appends the ids of `text`, which holds no added token.
  void encodeOrdinary(std::string_view text, std::vector<int32_t> &ids) const;

  struct PreTokenizerStep {
    std::unique_ptr<PatternSplit> split; // null: no split in this step
    bool byteLevel = false;
    bool addPrefixSpace = false;
  };

  std::string source_;
  std::unique_ptr<BpeModel> model_;
  std::vector<PreTokenizerStep> preTokenizer_;
  std::vector<AddedToken> added_;        // longest first
  std::vector<const AddedToken *> byId_; // per id, null where none
  // The added tokens each first byte may start, longest first: encode()
  // tries only these at each position (Llama 4 adds over a thousand).
  std::array<std::vector<const AddedToken *>, 256> byFirstByte_;
  std::vector<int32_t> prefix_, suffix_; // the template's tokens around the text
  std::optional<int32_t> bos_, eos_;
  std::string bosText_, eosText_; // their names, for the chat template
  std::unique_ptr<jinja::Template> chatTemplate_;
  int32_t idLimit_ = 0;
};

} // namespace kiln::text
