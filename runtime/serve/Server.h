// kiln-serve's HTTP side (cpp-httplib): the OpenAI-compatible routes over a
// Scheduler.
//   POST /v1/completions   prompt as text or token ids; whole or streamed
//                          (server-sent events), usage counts, logprobs
//   POST /v1/chat/completions  messages through the tokenizer's chat
//                          template; a message, or delta chunks
//   GET  /v1/models        the one model this server runs
//   GET  /health           200 while the engine works, else 503 and why
//                          (also while draining)
//   GET  /metrics          Prometheus text (Metrics.h)
// A full queue answers 429; bad requests 400 naming the field; all errors
// in OpenAI's error object. drain() (kiln-serve's SIGTERM) lets the requests
// in flight finish, streams included, answering new ones 503, then stops.
#pragma once

#include "runtime/serve/Metrics.h"
#include "runtime/serve/OpenAiApi.h"
#include "runtime/serve/Scheduler.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace kiln::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000; // 0: any free port (boundPort() says which)
  int httpThreads = 16;
};

class Server {
public:
  Server(Scheduler &scheduler, Metrics &metrics, ModelInfo model,
         std::shared_ptr<const text::Tokenizer> tokenizer, ServerOptions options);
  ~Server();
  // Binds the port; throws std::runtime_error when it cannot.
  int bind();
  // Serves until stop() or a drain's end; returns false on a listen error.
  bool serve();
  // Stops at once: streams in flight are cut.
  void stop();
  // Refuses new generation requests (503) and stops once every request in
  // flight has been answered, its stream written to the end. Returns at
  // once; the requests in flight, when the drain began.
  int64_t drain();

private:
  // /v1/completions, or /v1/chat/completions where `chat`.
  void generate(const std::string &body, bool chat, void *response);

  Scheduler &scheduler_;
  Metrics &metrics_;
  ModelInfo model_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<uint64_t> nextId_{1};
  // Generation requests whose answer is not yet written to its end.
  std::atomic<int64_t> inFlight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> serving_{false}, stopRequested_{false};
  std::thread drainer_;
  int listenSocket_ = -1;
};

} // namespace kiln::serve
