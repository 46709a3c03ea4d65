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

GenerationParams parseCompletion(const std::string &text, const ModelInfo &model,
                                 const text::Tokenizer *tokenizer) {
  json body;
  try {
    body = parseStrictJson(text, "the request body");
  } catch (const std::exception &error) {
    throw ApiError(400, std::string("the request body is not JSON: ") + error.what());
  }
  if (!body.is_object())
    throw ApiError(400, "the request body must be a JSON object");
  static const char *const kKnown[] = {"model", "prompt", "max_tokens",    "temperature", "top_p",
                                       "seed",  "stop",   "logprobs",      "stream",      "n",
                                       "echo",  "user",   "stream_options"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool known = false;
    for (const char *key : kKnown)
      known = known || it.key() == key;
    if (!known)
      bad(it.key().substr(0, 64), "not a field kiln-serve takes");
  }
  if (const auto found = body.find("model"); found != body.end() && !found->is_null()) {
    if (!found->is_string() || found->get<std::string>() != model.name)
      throw ApiError(404, "model: this server serves '" + model.name + "' only", "model",
                     "not_found_error");
  }
  if (integer(body, "n", 1, 1, 1) != 1)
    bad("n", "one choice per request");
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
  if (params.prompt.empty())
    bad("prompt", "the prompt has no tokens");
  for (int32_t id : params.prompt)
    if (id >= model.vocab)
      bad("prompt", "token id " + std::to_string(id) + " is outside the model's vocabulary");

  params.maxTokens = integer(body, "max_tokens", 16, 1, model.contextLength);
  const int64_t needed = static_cast<int64_t>(params.prompt.size()) + params.maxTokens - 1;
  if (needed > model.contextLength)
    bad("max_tokens", std::to_string(params.prompt.size()) + " prompt tokens and " +
                          std::to_string(params.maxTokens) + " new ones need a context of " +
                          std::to_string(needed) + "; the server's holds " +
                          std::to_string(model.contextLength));
  params.sampling.temperature = number(body, "temperature", 1.0, 0, 2);
  params.sampling.topP = number(body, "top_p", 1.0, 0, 1);
  if (params.sampling.topP <= 0)
    bad("top_p", "expected a number in (0, 1]");
  params.sampling.seed = static_cast<uint64_t>(integer(body, "seed", 0, 0, INT64_MAX));
  params.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, 20));
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
  return params;
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
