// kiln-bench-serve: a multi-turn agentic replay against a running kiln-serve
// (issue 22, item 6). The bench makes the workload itself: each session
// starts with a system prompt all sessions share and a first request of its
// own, then, turn by turn, asks for a reply, appends the reply and a tool's
// output to its history and asks again, so that its prompts grow as an
// agent's do and each repeats the last one. At each concurrency (sessions
// in flight at once) it reports time to first token (p50, p99), time per
// output token (p50), tokens/s per user (p50 of 1 / TPOT), total generated
// tokens/s, and the prefix hit rate (prompt tokens the server found cached,
// from its /metrics, over the prompt tokens sent).
//
// Prompts are token ids (no tokenizer needed); greedy replies.
#include "runtime/core/AtomicFile.h"
#include "runtime/core/FlagValue.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void usage(const char *problem, int code) {
  if (problem)
    std::fprintf(stderr, "kiln-bench-serve: error: %s (kiln-bench-serve --help for usage)\n",
                 problem);
  else
    std::printf(
        "usage: kiln-bench-serve URL [options]\n"
        "\n"
        "A multi-turn agentic replay against kiln-serve at URL (http://HOST:PORT): sessions\n"
        "share a system prompt; each turn asks for a reply, then appends the reply and a\n"
        "tool's output to the session's history for the next turn.\n"
        "\n"
        "  --concurrency LIST   sessions in flight at once, one run each (default 1,8,32,128)\n"
        "  --sessions-per-slot N  sessions a run takes: N times its concurrency (default 1)\n"
        "  --turns N            turns a session (default 6)\n"
        "  --system-tokens N    the shared system prompt (default 256)\n"
        "  --first-tokens N     a session's first request (default 64)\n"
        "  --tool-tokens N      a tool's output appended after each reply (default 192)\n"
        "  --reply-tokens N     max_tokens of each reply (default 32)\n"
        "  --vocab N            prompt ids drawn from 1..N-1 (default 1000)\n"
        "  --seed S             the workload's seed (default 1)\n"
        "  --label TEXT         printed with each line (e.g. 'prefix reuse off')\n"
        "  --json FILE          also write the figures as JSON\n"
        "  --print-middle-context  print the prompt length halfway through a session\n"
        "                       (for the decode steps' roofline) and exit\n"
        "  --help               this text\n"
        "\n"
        "A 429 (the server's queue is full) is retried after 20 ms, a connection that fails\n"
        "before any token twice; both are counted (retries).\n");
  std::exit(code);
}

struct Options {
  std::string url;
  std::vector<int64_t> concurrency = {1, 8, 32, 128};
  int64_t sessionsPerSlot = 1, turns = 6, systemTokens = 256, firstTokens = 64, toolTokens = 192,
          replyTokens = 32, vocab = 1000, seed = 1;
  std::string label, jsonPath;
  bool printMiddleContext = false;
  // The prompt of turn `turn` (0-based) of a session: its history so far.
  int64_t promptAt(int64_t turn) const {
    return systemTokens + firstTokens + turn * (replyTokens + toolTokens);
  }
};

int64_t positive(const std::string &flag, const char *text, int64_t atLeast = 1) {
  const std::optional<int64_t> value = kiln::integerIn<int64_t>(text, atLeast, int64_t{1} << 30);
  if (!value)
    usage(kiln::notAnIntegerIn<int64_t>(flag, text, atLeast, int64_t{1} << 30).c_str(), 2);
  return *value;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      usage(nullptr, 0);
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        usage((arg + " needs a value").c_str(), 2);
      return argv[++i];
    };
    if (arg == "--concurrency") {
      o.concurrency.clear();
      std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.concurrency.push_back(positive(arg, list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (arg == "--sessions-per-slot") {
      o.sessionsPerSlot = positive(arg, value());
    } else if (arg == "--turns") {
      o.turns = positive(arg, value());
    } else if (arg == "--system-tokens") {
      o.systemTokens = positive(arg, value(), 0);
    } else if (arg == "--first-tokens") {
      o.firstTokens = positive(arg, value());
    } else if (arg == "--tool-tokens") {
      o.toolTokens = positive(arg, value(), 0);
    } else if (arg == "--reply-tokens") {
      o.replyTokens = positive(arg, value());
    } else if (arg == "--vocab") {
      o.vocab = positive(arg, value(), 2);
    } else if (arg == "--seed") {
      o.seed = positive(arg, value(), 0);
    } else if (arg == "--label") {
      o.label = value();
    } else if (arg == "--json") {
      o.jsonPath = value();
    } else if (arg == "--print-middle-context") {
      o.printMiddleContext = true;
    } else if (!arg.empty() && arg[0] == '-') {
      usage(("unknown option " + arg).c_str(), 2);
    } else if (o.url.empty()) {
      o.url = arg;
    } else {
      usage(("a second URL '" + arg + "'").c_str(), 2);
    }
  }
  if (o.url.empty())
    usage("the server's URL is required", 2);
  if (o.url.rfind("http://", 0) != 0)
    usage(("the URL " + kiln::quoteName(o.url) + " is not http://HOST:PORT").c_str(), 2);
  return o;
}

std::vector<int64_t> randomIds(std::mt19937_64 &rng, int64_t count, int64_t vocab) {
  std::uniform_int_distribution<int64_t> id(1, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t &v : ids)
    v = id(rng);
  return ids;
}

// One request's timings.
struct Sample {
  double ttft = 0, tpot = 0; // seconds; tpot 0 for a one-token reply
  int64_t prompt = 0, generated = 0;
};

// What the streamed reply of one request gave.
struct Reply {
  std::vector<int64_t> ids;
  Sample sample;
};

class Client {
public:
  explicit Client(const std::string &url) : url_(url), http_(url) {
    http_.set_read_timeout(600, 0);
    http_.set_write_timeout(60, 0);
    http_.set_connection_timeout(10, 0);
  }

  // Streams one completion; a 429 is retried (counted in `retries`).
  Reply complete(const std::vector<int64_t> &prompt, int64_t maxTokens,
                 std::atomic<int64_t> &retries) {
    const std::string body = json{
        {"prompt", prompt},
        {"max_tokens", maxTokens},
        {"temperature", 0},
        {"stream", true}}.dump();
    reconnects_ = 0;
    for (;;) {
      Reply reply;
      reply.sample.prompt = static_cast<int64_t>(prompt.size());
      std::string pending, error;
      Clock::time_point sent = Clock::now(), first, last;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char *data, size_t size, uint64_t, uint64_t) {
        pending.append(data, size);
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
          const std::string event = pending.substr(0, end);
          pending.erase(0, end + 2);
          if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]")
            continue;
          const json chunk = json::parse(event.substr(6), nullptr, false);
          if (chunk.is_discarded() || chunk.contains("error")) {
            error = chunk.is_discarded() ? "a chunk that is not JSON" : chunk["error"].dump();
            return false;
          }
          const json &choice = chunk["choices"][0];
          if (!choice.contains("token_ids"))
            continue;
          for (const json &id : choice["token_ids"]) {
            const Clock::time_point now = Clock::now();
            if (reply.ids.empty())
              first = now;
            last = now;
            reply.ids.push_back(id.get<int64_t>());
          }
        }
        return true;
      };
      httplib::Response res;
      httplib::Error failure = httplib::Error::Success;
      const bool ok = http_.send(req, res, failure);
      if (ok && res.status == 429) {
        ++retries;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      // A connection that failed before any token (the server's workers all
      // busy streaming, a socket closed under us) is tried again, twice.
      if (!ok && reply.ids.empty() && error.empty() && ++reconnects_ <= 2) {
        ++retries;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (!ok || res.status != 200 || !error.empty() || reply.ids.empty())
        throw std::runtime_error(
            "POST /v1/completions (" + std::to_string(prompt.size()) + " prompt tokens): " +
            (!ok                 ? httplib::to_string(failure)
             : !error.empty()    ? error
             : res.status != 200 ? "HTTP " + std::to_string(res.status) + " " + res.body
                                 : std::string("no tokens in the reply")));
      const std::chrono::duration<double> ttft = first - sent, decode = last - first;
      reply.sample.ttft = ttft.count();
      reply.sample.generated = static_cast<int64_t>(reply.ids.size());
      if (reply.ids.size() > 1)
        reply.sample.tpot = decode.count() / static_cast<double>(reply.ids.size() - 1);
      return reply;
    }
  }

  // The counter `name` of the server's /metrics.
  double counter(const std::string &name) {
    httplib::Result res = http_.Get("/metrics");
    if (!res)
      throw std::runtime_error("cannot reach " + url_ + "/metrics (" +
                               httplib::to_string(res.error()) +
                               "): is kiln-serve listening there?");
    if (res->status != 200)
      throw std::runtime_error("GET " + url_ + "/metrics: HTTP " + std::to_string(res->status));
    const std::string &text = res->body;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      const std::string line = text.substr(at, end - at);
      if (line.rfind(name + " ", 0) == 0)
        return std::strtod(line.c_str() + name.size() + 1, nullptr);
      at = end + 1;
    }
    throw std::runtime_error("GET /metrics: no counter " + name);
  }

private:
  std::string url_;
  httplib::Client http_;
  int reconnects_ = 0;
};

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const size_t at = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[at];
}

struct RunResult {
  int64_t sessions = 0, requests = 0, promptTokens = 0, generated = 0, retries = 0;
  double seconds = 0, ttftP50 = 0, ttftP99 = 0, tpotP50 = 0, userTokensP50 = 0,
         totalTokensPerSecond = 0, prefixHitRate = 0;
};

RunResult runAt(const Options &o, int64_t concurrency, const std::vector<int64_t> &system) {
  const int64_t sessions = concurrency * o.sessionsPerSlot;
  std::vector<std::vector<Sample>> samples(static_cast<size_t>(sessions));
  std::atomic<int64_t> next{0}, retries{0};
  std::mutex errorLock;
  std::string firstError;
  Client probe(o.url);
  const double reusedBefore = probe.counter("kiln_prefix_reused_tokens_total");
  const Clock::time_point start = Clock::now();
  auto worker = [&]() {
    Client client(o.url);
    for (int64_t s; (s = next++) < sessions;) {
      try {
        // The session's own ids: its seed and index, so that every run of a
        // concurrency sends the same prompts.
        std::mt19937_64 rng(static_cast<uint64_t>(o.seed) * 1000003u + static_cast<uint64_t>(s));
        std::vector<int64_t> history = system;
        const std::vector<int64_t> first = randomIds(rng, o.firstTokens, o.vocab);
        history.insert(history.end(), first.begin(), first.end());
        for (int64_t turn = 0; turn < o.turns; ++turn) {
          Reply reply = client.complete(history, o.replyTokens, retries);
          samples[static_cast<size_t>(s)].push_back(reply.sample);
          history.insert(history.end(), reply.ids.begin(), reply.ids.end());
          const std::vector<int64_t> tool = randomIds(rng, o.toolTokens, o.vocab);
          history.insert(history.end(), tool.begin(), tool.end());
        }
      } catch (const std::exception &e) {
        std::lock_guard<std::mutex> guard(errorLock);
        if (firstError.empty())
          firstError = "session " + std::to_string(s) + ": " + e.what();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < concurrency; ++i)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
  if (!firstError.empty())
    throw std::runtime_error(firstError);
  const std::chrono::duration<double> wall = Clock::now() - start;
  const double reused = probe.counter("kiln_prefix_reused_tokens_total") - reusedBefore;

  RunResult r;
  r.sessions = sessions;
  r.seconds = wall.count();
  r.retries = retries;
  std::vector<double> ttft, tpot, perUser;
  for (const std::vector<Sample> &session : samples)
    for (const Sample &s : session) {
      ++r.requests;
      r.promptTokens += s.prompt;
      r.generated += s.generated;
      ttft.push_back(s.ttft);
      if (s.tpot > 0) {
        tpot.push_back(s.tpot);
        perUser.push_back(1.0 / s.tpot);
      }
    }
  r.ttftP50 = quantile(ttft, 0.50);
  r.ttftP99 = quantile(ttft, 0.99);
  r.tpotP50 = quantile(tpot, 0.50);
  r.userTokensP50 = quantile(perUser, 0.50);
  r.totalTokensPerSecond = static_cast<double>(r.generated) / r.seconds;
  r.prefixHitRate = r.promptTokens ? reused / static_cast<double>(r.promptTokens) : 0.0;
  return r;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  if (o.printMiddleContext) {
    std::printf("%lld\n", static_cast<long long>(o.promptAt(o.turns / 2)));
    return 0;
  }
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  const std::vector<int64_t> system = randomIds(rng, o.systemTokens, o.vocab);
  const std::string label = o.label.empty() ? "" : " [" + o.label + "]";
  const int64_t longest = o.promptAt(o.turns - 1);
  std::printf("kiln-bench-serve%s: %s, sessions of %lld turns (system prompt %lld shared, first "
              "request %lld, replies of %lld, tool outputs %lld: prompts up to %lld tokens)\n",
              label.c_str(), o.url.c_str(), static_cast<long long>(o.turns),
              static_cast<long long>(o.systemTokens), static_cast<long long>(o.firstTokens),
              static_cast<long long>(o.replyTokens), static_cast<long long>(o.toolTokens),
              static_cast<long long>(longest));
  json out = json::array();
  try {
    for (int64_t c : o.concurrency) {
      const RunResult r = runAt(o, c, system);
      std::printf("concurrency %4lld%s: %lld requests in %.2f s; TTFT p50 %.1f ms p99 %.1f ms; "
                  "TPOT p50 %.2f ms; %.1f tokens/s per user (p50); %.1f tokens/s in all; "
                  "prefix hit rate %.1f%%; retries %lld\n",
                  static_cast<long long>(c), label.c_str(), static_cast<long long>(r.requests),
                  r.seconds, r.ttftP50 * 1e3, r.ttftP99 * 1e3, r.tpotP50 * 1e3, r.userTokensP50,
                  r.totalTokensPerSecond, 100.0 * r.prefixHitRate,
                  static_cast<long long>(r.retries));
      std::fflush(stdout);
      out.push_back({{"concurrency", c},
                     {"sessions", r.sessions},
                     {"requests", r.requests},
                     {"seconds", r.seconds},
                     {"prompt_tokens", r.promptTokens},
                     {"generated_tokens", r.generated},
                     {"ttft_p50_s", r.ttftP50},
                     {"ttft_p99_s", r.ttftP99},
                     {"tpot_p50_s", r.tpotP50},
                     {"tokens_per_second_per_user_p50", r.userTokensP50},
                     {"tokens_per_second", r.totalTokensPerSecond},
                     {"prefix_hit_rate", r.prefixHitRate},
                     {"retries", r.retries},
                     {"label", o.label}});
    }
    if (!o.jsonPath.empty())
      kiln::writeFileAtomically(o.jsonPath, out.dump(2) + "\n");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-bench-serve: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
