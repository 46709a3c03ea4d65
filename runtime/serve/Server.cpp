#include "runtime/serve/Server.h"

#include <httplib.h>

#include <ctime>
#include <sys/socket.h>

namespace kiln::serve {
namespace {

using json = nlohmann::json;

// A request body's bytes at most: a prompt of a million token ids is about 8 MiB.
constexpr size_t kMaxBodyBytes = size_t(64) << 20;

void sendJson(httplib::Response &res, int status, const json &body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void sendError(httplib::Response &res, const ApiError &error) {
  sendJson(res, error.status, errorBody(error));
}

// Counts a generation request in flight from its arrival until its answer
// is written (a stream's provider holds it to the end).
class InFlight {
public:
  explicit InFlight(std::atomic<int64_t> &count) : count_(count) { ++count_; }
  ~InFlight() { --count_; }
  InFlight(const InFlight &) = delete;
  InFlight &operator=(const InFlight &) = delete;

private:
  std::atomic<int64_t> &count_;
};

json usage(size_t prompt, size_t generated) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", generated},
          {"total_tokens", prompt + generated}};
}

} // namespace

Server::Server(Scheduler &scheduler, Metrics &metrics, ModelInfo model,
               std::shared_ptr<const text::Tokenizer> tokenizer, ServerOptions options)
    : scheduler_(scheduler), metrics_(metrics), model_(std::move(model)),
      tokenizer_(std::move(tokenizer)), options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
  // The listening socket: SO_REUSEADDR (a restart binds at once) but not
  // httplib's SO_REUSEPORT, with which a second server on the same port
  // would share its connections instead of failing to bind; kept to raise
  // its backlog after bind().
  http_->set_socket_options([this](int socket) {
    int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listenSocket_ = socket;
  });
  const int threads = options_.httpThreads;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    const std::string problem = scheduler_.problem();
    if (!problem.empty())
      sendJson(res, 503, {{"status", "failed"}, {"error", problem}});
    else if (draining_)
      sendJson(res, 503, {{"status", "draining"}});
    else
      sendJson(res, 200, {{"status", "ok"}});
  });
  http_->Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
    sendJson(res, 200,
             {{"object", "list"},
              {"data", json::array({{{"id", model_.name},
                                     {"object", "model"},
                                     {"created", 0},
                                     {"owned_by", "kiln"},
                                     {"max_model_len", model_.contextLength}}})}});
  });
  http_->Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
    res.set_content(metrics_.text(scheduler_.snapshot()), "text/plain; version=0.0.4");
  });
  // The generation routes read their bodies themselves: httplib's own
  // reading refuses a form-encoded body over 8 KiB (413), which is what
  // `curl -d` sends without a Content-Type header; the body is JSON whatever
  // the header says.
  http_->set_payload_max_length(kMaxBodyBytes);
  const auto bodyOf = [](const httplib::ContentReader &reader) {
    std::string body;
    reader([&](const char *data, size_t size) {
      body.append(data, size);
      return true;
    });
    return body;
  };
  http_->Post("/v1/completions", [this, bodyOf](const httplib::Request &, httplib::Response &res,
                                                const httplib::ContentReader &reader) {
    generate(bodyOf(reader), /*chat=*/false, &res);
  });
  http_->Post("/v1/chat/completions",
              [this, bodyOf](const httplib::Request &, httplib::Response &res,
                             const httplib::ContentReader &reader) {
                generate(bodyOf(reader), /*chat=*/true, &res);
              });
  http_->set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty())
      return;
    if (res.status == 413)
      sendError(res, ApiError(413, "the request body is over " +
                                       std::to_string(kMaxBodyBytes >> 20) + " MiB"));
    else if (res.status == 404)
      sendError(res, ApiError(404, "no route " + req.method + " " + req.path.substr(0, 200), "",
                              "not_found_error"));
    else
      sendError(res, ApiError(res.status, "the request could not be read (HTTP " +
                                              std::to_string(res.status) + ")"));
  });
}

Server::~Server() {
  if (drainer_.joinable())
    drainer_.join();
}

int Server::bind() {
  const int port = options_.port == 0
                       ? http_->bind_to_any_port(options_.host)
                       : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port < 0)
    throw std::runtime_error("cannot listen on " + options_.host + ":" +
                             std::to_string(options_.port) + " (in use, or not this host's)");
  // httplib listens with a backlog of 5: clients arriving together beyond
  // that (a load balancer's burst, a benchmark's 128 sessions) had their
  // connections reset. Listening again sets the backlog.
  if (listenSocket_ >= 0)
    ::listen(listenSocket_, SOMAXCONN);
  return port;
}

bool Server::serve() {
  serving_ = true;
  if (stopRequested_)
    return true;
  return http_->listen_after_bind();
}

void Server::stop() {
  stopRequested_ = true;
  // httplib's stop() does nothing before its listen loop runs: a stop that
  // comes between serve()'s check and the loop's start waits for it (a stop
  // before serve() is seen by serve() itself).
  for (int i = 0; i < 1000 && serving_ && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http_->stop();
}

int64_t Server::drain() {
  if (draining_.exchange(true))
    return inFlight_;
  const int64_t now = inFlight_;
  drainer_ = std::thread([this] {
    // A request that passed the draining check just before it was set
    // counts itself before it reaches the scheduler; this waits for it too.
    while (inFlight_ > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop();
  });
  return now;
}

namespace {

// One choice of a response or a stream chunk. Completions carry "text";
// chat "message" (whole) or "delta" (streamed; the role with the first).
json choiceOf(bool chat, bool streamed, bool first, const std::string &text, const json &ids,
              json logprobs, const json &finishReason) {
  json choice = {{"index", 0}};
  if (!chat) {
    choice["text"] = text;
  } else if (!streamed) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["delta"] = json::object();
    if (first)
      choice["delta"]["role"] = "assistant";
    if (!ids.empty())
      choice["delta"]["content"] = text;
  }
  if (!ids.empty())
    choice["token_ids"] = ids;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finishReason;
  return choice;
}

} // namespace

void Server::generate(const std::string &body, bool chat, void *opaque) {
  httplib::Response &res = *static_cast<httplib::Response *>(opaque);
  auto inFlight = std::make_shared<InFlight>(inFlight_);
  // Every answer is counted, the refusals too: a drain's 503 as rejected
  // (as a full queue's 429), a failed engine's as an error.
  if (draining_) {
    metrics_.requestFinished("rejected");
    return sendError(res, ApiError(503, "the server is shutting down", "", "server_error"));
  }
  auto request = std::make_shared<Request>();
  try {
    request->params = chat ? parseChatCompletion(body, model_, tokenizer_.get())
                           : parseCompletion(body, model_, tokenizer_.get());
  } catch (const ApiError &error) {
    metrics_.requestFinished("error");
    return sendError(res, error);
  }
  if (const std::string problem = scheduler_.problem(); !problem.empty()) {
    metrics_.requestFinished("error");
    return sendError(res, ApiError(503, "the engine failed: " + problem, "", "server_error"));
  }
  request->id = nextId_++;
  if (!scheduler_.submit(request)) {
    metrics_.requestFinished("rejected");
    return sendError(
        res, ApiError(429, "too many requests waiting; try again later", "", "rate_limit_error"));
  }
  // What every response and chunk of this request carries.
  auto head = std::make_shared<json>(
      json{{"id", (chat ? "chatcmpl-" : "cmpl-") + std::to_string(request->id)},
           {"object", chat ? (request->params.stream ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion"},
           {"created", static_cast<int64_t>(std::time(nullptr))},
           {"model", model_.name}});
  const size_t promptTokens = request->params.prompt.size();
  const auto tokenizer = tokenizer_;
  const auto logprobsOf = [chat, tokenizer, request](const std::vector<TokenEvent> &events,
                                                     size_t textOffset) -> json {
    if (request->params.logprobs < 0)
      return nullptr;
    return chat ? chatLogprobsBody(events, tokenizer.get())
                : logprobsBody(events, tokenizer.get(), textOffset);
  };

  if (!request->params.stream) {
    std::vector<TokenEvent> events;
    for (;;) {
      bool timedOut = false;
      std::optional<TokenEvent> event =
          request->channel.next(std::chrono::milliseconds(1000), &timedOut);
      if (event)
        events.push_back(std::move(*event));
      else if (!timedOut)
        break;
    }
    const Finish finish = request->channel.finishState();
    if (finish.reason.empty())
      return sendError(res, ApiError(finish.httpStatus, finish.error, "", "server_error"));
    std::string text;
    json ids = json::array();
    for (const TokenEvent &event : events) {
      text += event.text;
      ids.push_back(event.id);
    }
    json response = *head;
    response["choices"] =
        json::array({choiceOf(chat, false, true, text, ids, logprobsOf(events, 0), finish.reason)});
    response["usage"] = usage(promptTokens, events.size());
    return sendJson(res, 200, response);
  }

  // Streamed: a server-sent event per token, then the finish and the usage.
  struct StreamState {
    size_t generated = 0, textOffset = 0;
  };
  auto state = std::make_shared<StreamState>();
  res.set_chunked_content_provider(
      "text/event-stream",
      [request, state, head, chat, logprobsOf, promptTokens, inFlight](size_t,
                                                                       httplib::DataSink &sink) {
        const auto send = [&](const json &chunk) {
          const std::string line = "data: " + chunk.dump() + "\n\n";
          if (!sink.write(line.data(), line.size())) {
            request->channel.cancel(); // the client is gone
            return false;
          }
          return true;
        };
        const auto chunkOf = [&](json choice) {
          json chunk = *head;
          chunk["choices"] = json::array({std::move(choice)});
          return chunk;
        };
        bool timedOut = false;
        std::optional<TokenEvent> event =
            request->channel.next(std::chrono::milliseconds(1000), &timedOut);
        if (event) {
          json choice =
              choiceOf(chat, true, state->generated == 0, event->text, json::array({event->id}),
                       logprobsOf({*event}, state->textOffset), nullptr);
          state->textOffset += event->text.size();
          ++state->generated;
          return send(chunkOf(std::move(choice)));
        }
        if (timedOut)
          return true; // nothing yet: asked again
        const Finish finish = request->channel.finishState();
        if (finish.reason.empty()) {
          send({{"error", {{"message", finish.error}, {"type", "server_error"}}}});
        } else {
          json last = chunkOf(choiceOf(chat, true, state->generated == 0, "", json::array(),
                                       nullptr, finish.reason));
          last["usage"] = usage(promptTokens, state->generated);
          if (!send(last))
            return false;
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      },
      [request](bool success) {
        if (!success)
          request->channel.cancel();
      });
}

} // namespace kiln::serve
