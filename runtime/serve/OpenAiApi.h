// The OpenAI completions API as kiln-serve speaks it: a request body checked
// into GenerationParams (every field's type and range, with the field named
// in the error), and the response objects, whole or as server-sent event
// chunks. https://platform.openai.com/docs/api-reference/completions
#pragma once

#include "runtime/serve/Request.h"
#include "runtime/text/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <stdexcept>
#include <string>

namespace kiln::serve {

// A request the API refuses: the HTTP status and OpenAI's error object.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string &message, std::string param = std::string(),
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)),
        type(std::move(type)) {}
  int status;
  std::string param, type;
};

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json errorBody(const ApiError &error);

struct ModelInfo {
  std::string name; // what "model" must be (or be absent)
  int64_t vocab = 0;
  int64_t contextLength = 0;
};

// The body of POST /v1/completions, checked. `prompt` is a string (needs the
// tokenizer) or an array of token ids; the prompt and max_tokens must fit the
// context. Throws ApiError(400, ...) naming the field.
GenerationParams parseCompletion(const std::string &body, const ModelInfo &model,
                                 const text::Tokenizer *tokenizer);

// The body of POST /v1/chat/completions: `messages` rendered by the
// tokenizer's chat template (with `tools`, and the generation prompt) and
// tokenized without special tokens; max_tokens or max_completion_tokens,
// logprobs with top_logprobs. Throws ApiError(400, ...) naming the field,
// and where the tokenizer has no chat template.
GenerationParams parseChatCompletion(const std::string &body, const ModelInfo &model,
                                     const text::Tokenizer *tokenizer);

// The chat API's logprobs: {"content": [{token, logprob, bytes,
// top_logprobs}]}.
nlohmann::json chatLogprobsBody(const std::vector<TokenEvent> &events,
                                const text::Tokenizer *tokenizer);

// One choice's logprobs object for `events` (OpenAI's legacy completions
// form: tokens, token_logprobs, top_logprobs, text_offset).
nlohmann::json logprobsBody(const std::vector<TokenEvent> &events, const text::Tokenizer *tokenizer,
                            size_t textOffset);

} // namespace kiln::serve
