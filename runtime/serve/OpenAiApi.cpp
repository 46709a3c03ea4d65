#include "runtime/serve/OpenAiApi.h"

#include "runtime/core/StrictJson.h"

#include <cmath>

namespace kiln::serve {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string &param, const std::string &message) {
  throw ApiError(400, param + ": " + message, param);
}

double number(const json &body, const char *key, double fallback, double low, double high) {
  const auto found = body.find(key);
  if (found == body.end() || found->is_null())
    return fallback;
  if (!found->is_number())
    bad(key, std::string("expected a number, found ") + found->type_name());
  const double value = found->get<double>();
  if (!std::isfinite(value) || value < low || value > high)
    bad(key, "expected a number in [" + std::to_string(low) + ", " + std::to_string(high) +
                 "], found " + found->dump());
  return value;
}

int64_t integer(const json &body, const char *key, int64_t fallback, int64_t low, int64_t high) {
  const auto found = body.find(key);
  if (found == body.end() || found->is_null())
    return fallback;
  if (!found->is_number_integer())
    bad(key, std::string("expected an integer, found ") + found->type_name());
  const int64_t value = found->get<int64_t>();
  if (value < low || value > high)
    bad(key, "expected an integer in " + std::to_string(low) + ".." + std::to_string(high) +
                 ", found " + std::to_string(value));
  return value;
}

// The text of `id` for a client (lossy where a character straddles
// tokens), or "token_id:N" where there is no tokenizer or no token.
std::string tokenText(const text::Tokenizer *tokenizer, int32_t id) {
  if (!tokenizer || id >= tokenizer->idLimit() || !tokenizer->hasToken(id))
    return "token_id:" + std::to_string(id);
  text::Utf8Stream stream;
  std::string out = stream.push(tokenizer->tokenBytes(id));
  return out + stream.finish();
}

} // namespace

json errorBody(const ApiError &error) {
  return {{"error",
           {{"message", error.what()},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", nullptr}}}};
}

namespace {

// The body as a JSON object whose fields are all among `known`.
json parseBody(const std::string &text, std::initializer_list<const char *> known) {
  json body;
  try {
    body = parseStrictJson(text, "the request body");
  } catch (const std::exception &error) {
    throw ApiError(400, error.what());
  }
  if (!body.is_object())
    throw ApiError(400, "the request body must be a JSON object");
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool found = false;
    for (const char *key : known)
      found = found || it.key() == key;
    if (!found)
      bad(it.key().substr(0, 64), "not a field kiln-serve takes");
  }
  if (const auto found = body.find("n"); found != body.end() && !found->is_null())
    if (integer(body, "n", 1, 1, 1) != 1)
      bad("n", "one choice per request");
  return body;
}

void checkModel(const json &body, const ModelInfo &model) {
  if (const auto found = body.find("model"); found != body.end() && !found->is_null())
    if (!found->is_string() || found->get<std::string>() != model.name)
      throw ApiError(400, "model: this server serves '" + model.name + "' only", "model");
}

// What both APIs share: the length, sampling, stop texts and streaming,
// once the prompt is known.
void parseGeneration(const json &body, const char *promptField, const char *lengthField,
                     const ModelInfo &model, const text::Tokenizer *tokenizer,
                     GenerationParams &params) {
  if (params.prompt.empty())
    bad(promptField, "the prompt has no tokens");
  for (int32_t id : params.prompt)
    if (id >= model.vocab)
      bad(promptField, "token id " + std::to_string(id) + " is outside the model's vocabulary");
  if (static_cast<int64_t>(params.prompt.size()) > model.contextLength)
    bad(promptField, std::to_string(params.prompt.size()) +
                         " prompt tokens are more than the server's context holds, " +
                         std::to_string(model.contextLength));
  params.maxTokens = integer(body, lengthField, 16, 1, model.contextLength);
  const int64_t needed = static_cast<int64_t>(params.prompt.size()) + params.maxTokens - 1;
  if (needed > model.contextLength)
    bad(lengthField, std::to_string(params.prompt.size()) + " prompt tokens and " +
                         std::to_string(params.maxTokens) + " new ones need a context of " +
                         std::to_string(needed) + "; the server's holds " +
                         std::to_string(model.contextLength));
  params.sampling.temperature = number(body, "temperature", 1.0, 0, 2);
  params.sampling.topP = number(body, "top_p", 1.0, 0, 1);
  if (params.sampling.topP <= 0)
    bad("top_p", "expected a number in (0, 1]");
  params.sampling.seed = static_cast<uint64_t>(integer(body, "seed", 0, 0, INT64_MAX));
  params.draftTokens = integer(body, "draft_tokens", -1, 0, 256);
  if (const auto stream = body.find("stream"); stream != body.end() && !stream->is_null()) {
    if (!stream->is_boolean())
      bad("stream", "expected true or false");
    params.stream = stream->get<bool>();
  }
  if (const auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    const json list = stop->is_string() ? json::array({*stop}) : *stop;
    if (!list.is_array() || list.size() > 4)
      bad("stop", "expected a string or an array of up to 4 strings");
    for (const json &item : list) {
      if (!item.is_string() || item.get<std::string>().empty())
        bad("stop", "expected non-empty strings");
      params.stop.push_back(item.get<std::string>());
    }
    if (!params.stop.empty() && !tokenizer)
      bad("stop", "stop texts need a tokenizer (start kiln-serve with --tokenizer DIR)");
  }
}

} // namespace

GenerationParams parseCompletion(const std::string &text, const ModelInfo &model,
                                 const text::Tokenizer *tokenizer) {
  const json body = parseBody(text, {"model", "prompt", "max_tokens", "temperature", "top_p",
                                     "seed", "stop", "logprobs", "stream", "n", "echo", "user",
                                     "stream_options", "draft_tokens"});
  checkModel(body, model);
  if (const auto echo = body.find("echo");
      echo != body.end() && echo->is_boolean() && echo->get<bool>())
    bad("echo", "kiln-serve does not echo the prompt");

  GenerationParams params;
  const auto prompt = body.find("prompt");
  if (prompt == body.end())
    bad("prompt", "required: a string, or an array of token ids");
  if (prompt->is_string()) {
    if (!tokenizer)
      bad("prompt", "text needs a tokenizer (start kiln-serve with --tokenizer DIR), or give "
                    "the prompt as an array of token ids");
    try {
      params.prompt = tokenizer->encode(prompt->get<std::string>());
    } catch (const std::exception &error) {
      bad("prompt", error.what());
    }
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    for (const json &id : *prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.vocab)
        bad("prompt", "token ids must be integers in 0.." + std::to_string(model.vocab - 1) +
                          ", found " + id.dump().substr(0, 32));
      params.prompt.push_back(id.get<int32_t>());
    }
  } else {
    bad("prompt", "expected a string or an array of token ids (one prompt per request)");
  }
  parseGeneration(body, "prompt", "max_tokens", model, tokenizer, params);
  params.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, 20));
  return params;
}

GenerationParams parseChatCompletion(const std::string &text, const ModelInfo &model,
                                     const text::Tokenizer *tokenizer) {
  const json body = parseBody(
      text, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
             "seed", "stop", "logprobs", "top_logprobs", "stream", "n", "user", "stream_options",
             "tools", "tool_choice", "parallel_tool_calls", "draft_tokens"});
  checkModel(body, model);
  if (!tokenizer || !tokenizer->hasChatTemplate())
    throw ApiError(400,
                   tokenizer ? "this tokenizer has no chat template (tokenizer_config.json's "
                               "chat_template): use /v1/completions"
                             : "chat needs a tokenizer with a chat template (start kiln-serve "
                               "with --tokenizer DIR)",
                   "messages");
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty())
    bad("messages", "required: a non-empty array of {role, content}");
  // The messages as the template sees them: content as text (parts of
  // type "text" joined), other fields as given, in the order given (the
  // template prints tools and arguments as JSON: parsed again keeping the
  // keys' order, which the checked `body` sorts).
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json &message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      bad(where, "expected an object with a string 'role'");
    nlohmann::ordered_json copy = ordered["messages"][i];
    if (const auto content = message.find("content");
        content != message.end() && content->is_array()) {
      std::string joined;
      for (const json &part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad(where + ".content", "kiln-serve takes text parts only (type \"text\")");
        joined += part["text"].get<std::string>();
      }
      copy["content"] = joined;
    } else if (content != message.end() && !content->is_string() && !content->is_null()) {
      bad(where + ".content", "expected a string or an array of text parts");
    }
    conversation.push_back(std::move(copy));
  }
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (const auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      bad("tools", "expected an array of tools");
    extra["tools"] = ordered["tools"];
  }
  if (const auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null())
    if (!choice->is_string() ||
        (choice->get<std::string>() != "auto" && choice->get<std::string>() != "none"))
      bad("tool_choice", "kiln-serve takes \"auto\" or \"none\" (the template decides)");

  GenerationParams params;
  try {
    params.prompt = tokenizer->encode(
        tokenizer->applyChatTemplate(conversation, /*addGenerationPrompt=*/true, extra),
        /*addSpecialTokens=*/false);
  } catch (const std::exception &error) {
    bad("messages", std::string("the chat template refused them: ") + error.what());
  }
  const bool modern = body.contains("max_completion_tokens");
  parseGeneration(body, "messages", modern ? "max_completion_tokens" : "max_tokens", model,
                  tokenizer, params);
  if (const auto logprobs = body.find("logprobs"); logprobs != body.end() && !logprobs->is_null()) {
    if (!logprobs->is_boolean())
      bad("logprobs", "expected true or false");
    if (logprobs->get<bool>())
      params.logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
  }
  params.chat = true;
  return params;
}

json chatLogprobsBody(const std::vector<TokenEvent> &events, const text::Tokenizer *tokenizer) {
  json content = json::array();
  const auto entry = [&](int32_t id, double logprob) {
    const std::string token = tokenText(tokenizer, id);
    json bytes = json::array();
    if (tokenizer && id < tokenizer->idLimit() && tokenizer->hasToken(id))
      for (const char c : tokenizer->tokenBytes(id))
        bytes.push_back(static_cast<uint8_t>(c));
    return json{{"token", token}, {"logprob", logprob}, {"bytes", bytes}};
  };
  for (const TokenEvent &event : events) {
    json item = entry(event.id, event.logprob);
    json top = json::array();
    for (const auto &[id, logprob] : event.top)
      top.push_back(entry(id, logprob));
    item["top_logprobs"] = top;
    content.push_back(item);
  }
  return {{"content", content}};
}

json logprobsBody(const std::vector<TokenEvent> &events, const text::Tokenizer *tokenizer,
                  size_t textOffset) {
  json tokens = json::array(), logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenEvent &event : events) {
    tokens.push_back(tokenText(tokenizer, event.id));
    logprobs.push_back(event.logprob);
    json alternatives = json::object();
    for (const auto &[id, logprob] : event.top)
      alternatives[tokenText(tokenizer, id)] = logprob;
    top.push_back(alternatives);
    offsets.push_back(textOffset);
    textOffset += event.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

} // namespace kiln::serve
