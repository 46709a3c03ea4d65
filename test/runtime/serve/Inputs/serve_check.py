"""Drives kiln-serve as a client would and checks what it answers against
kiln-run on the same artifact and weights.

  serve_check.py ARTIFACT TOKENIZER_DIR [--gpu]

--gpu: on a GPU the kernels of a verify call, and a prefix decoded in an
earlier turn, round differently from kiln-run's cold decode (docs/
speculative-decoding.md); there speculative and reused replies must be whole
and begin with kiln-run's token, elsewhere they must be kiln-run's.

Each check prints one line; any failure exits non-zero with what differed."""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

from serve_process import ServeProcess

ARTIFACT, TOK = sys.argv[1], sys.argv[2]
EXACT = "--gpu" not in sys.argv[3:]
WEIGHTS = "synthetic:1"


def fail(message):
    sys.exit("FAIL: " + message)


class Server:
    def __init__(self, *flags):
        self.process = ServeProcess([ARTIFACT, "--weights", WEIGHTS, "--tokenizer", TOK, *flags],
                                    start_timeout=60)
        self.port = self.process.port

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = body if body is None or isinstance(body, str) else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data

    def complete(self, body):
        return self.complete_at("/v1/completions", body)

    def complete_at(self, path, body):
        status, data = self.request("POST", path, body)
        return status, json.loads(data)

    def stream(self, body):
        return self.stream_at("/v1/completions", body)

    def stream_at(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", path, json.dumps(dict(body, stream=True)))
        response = conn.getresponse()
        events = []
        for raw in response.read().decode("utf-8").split("\n\n"):
            if raw.startswith("data: "):
                events.append(raw[len("data: "):])
        conn.close()
        return events

    def metrics(self):
        return self.process.metrics()

    def stop(self):
        self.process.stop(timeout=60)


def at_once(target, arg_lists):
    """Calls target(*args) for every args in a thread of its own, all at once,
    and returns when every call has."""
    threads = [threading.Thread(target=target, args=args) for args in arg_lists]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def tokenize(text):
    return json.loads(subprocess.run(["kiln-tokenize", TOK, "--text", text], check=True,
                                     capture_output=True).stdout)


def kiln_run_output(ids, new, *flags):
    return subprocess.run(["kiln-run", ARTIFACT, "--weights", WEIGHTS, "--prompt-ids",
                           ",".join(map(str, ids)), "--max-new-tokens", str(new), *flags],
                          check=True, capture_output=True, text=True).stdout


def kiln_run(ids, new):
    return [int(x) for x in kiln_run_output(ids, new).splitlines()[0].split(",")]


def kiln_run_lookup(ids, new):
    """kiln-run's own lookup speculation on the same prompt: (accepted, drafted)."""
    out = kiln_run_output(ids, new, "--speculate", "lookup", "--ngram-min", "1")
    found = re.search(r"\((\d+) of (\d+) drafts accepted\)", out)
    if not found:
        fail(f"kiln-run --speculate lookup printed no draft counts: {out!r}")
    return int(found.group(1)), int(found.group(2))


EOS = int([l.split(": ")[1] for l in subprocess.run(
    ["kiln-tokenize", TOK, "--info"], capture_output=True, text=True, check=True).stdout.splitlines()
    if l.startswith("eos:")][0])


def until_eos(ids):
    return ids[: ids.index(EOS) + 1] if EOS in ids else ids


PROMPTS = ["The quick brown fox", "안녕하세요, 세계!", "def compile(model):", "你好，世界！",
           "Grüße aus Köln", "numbers 1234567", "Emoji: 🚀🔥", "It's what they'd say"]
LENGTHS = [12, 5, 9, 16, 3, 11, 7, 14]
long_prompt = " ".join(PROMPTS * 6)
PROMPT_IDS = {p: tokenize(p) for p in PROMPTS}
reference = {p: until_eos(kiln_run(PROMPT_IDS[p], n)) for p, n in zip(PROMPTS, LENGTHS)}
reference[long_prompt] = until_eos(kiln_run(tokenize(long_prompt), 10))

# Exactness: --decode each runs kiln-run's kernels; 8 requests at once on 4
# slots, of different lengths, so that they wait, join and leave mid-batch;
# the long prompt prefills 64 tokens a step between the others' decode steps.
server = Server("--decode", "each", "--prefill-tokens-per-step", "64")
status, body = server.request("GET", "/health")
if status != 200:
    fail(f"/health: {status}")
SLOTS = int(server.metrics()["kiln_kv_slots_free"])
status, body = server.request("GET", "/v1/models")
MODEL = json.loads(body)["data"][0]["id"]
if not MODEL.startswith("muse-spark"):
    fail("/v1/models: " + body.decode())
results = {}


def ask(prompt, n):
    results[prompt] = server.complete({"model": MODEL, "prompt": prompt,
                                       "max_tokens": n, "temperature": 0})


at_once(ask, list(zip(PROMPTS, LENGTHS)) + [(long_prompt, 10)])
for prompt, (status, body) in results.items():
    if status != 200:
        fail(f"{prompt!r}: {status} {body}")
    choice = body["choices"][0]
    if choice["token_ids"] != reference[prompt]:
        fail(f"{prompt!r}: {choice['token_ids']} against kiln-run's {reference[prompt]}")
    expected_reason = "stop" if reference[prompt][-1] == EOS else "length"
    if choice["finish_reason"] != expected_reason:
        fail(f"{prompt!r}: finish_reason {choice['finish_reason']}")
    usage = body["usage"]
    if usage["prompt_tokens"] != len(tokenize(prompt)) or usage["completion_tokens"] != len(
            reference[prompt]):
        fail(f"{prompt!r}: usage {usage}")
print(f"9 concurrent requests on {SLOTS} slots (one of {len(tokenize(long_prompt))} prompt "
      "tokens in chunks of 64): the tokens of kiln-run")

# Streaming gives the same text, a chunk a token, each chunk whole UTF-8.
for prompt, n in zip(PROMPTS[:4], LENGTHS[:4]):
    whole = results[prompt][1]["choices"][0]
    events = server.stream({"prompt": prompt, "max_tokens": n, "temperature": 0})
    if events[-1] != "[DONE]":
        fail("the stream does not end with [DONE]")
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    ids = [i for c in chunks for i in c["choices"][0].get("token_ids", [])]
    if text != whole["text"] or ids != whole["token_ids"]:
        fail(f"stream of {prompt!r}: {text!r} {ids} against {whole['text']!r}")
    if chunks[-1]["choices"][0]["finish_reason"] != whole["finish_reason"] or \
            chunks[-1]["usage"]["completion_tokens"] != len(ids):
        fail(f"stream of {prompt!r}: last chunk {chunks[-1]}")
print("streamed: the same text and tokens, a chunk a token, usage last, then [DONE]")

# A stop text: the reply ends before it.
# (The longest reply of the greedy ones above, whatever this CPU's kernels
# made of it.)
stop_prompt, stop_n = max(zip(PROMPTS, LENGTHS),
                          key=lambda pn: len(results[pn[0]][1]["choices"][0]["text"]))
whole = results[stop_prompt][1]["choices"][0]["text"]
if len(whole) < 4:
    fail(f"no reply long enough to hold a stop text: {whole!r}")
stop = whole[len(whole) // 2: len(whole) // 2 + 2]
status, body = server.complete({"prompt": stop_prompt, "max_tokens": stop_n, "temperature": 0,
                                "stop": [stop]})
if body["choices"][0]["text"] != whole[: whole.index(stop)] or \
        body["choices"][0]["finish_reason"] != "stop":
    fail(f"stop {stop!r}: {body}")
print("a stop text ends the reply before it")

# Logprobs: greedy picks the most likely token.
status, body = server.complete({"prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0,
                                "logprobs": 3})
lp = body["choices"][0]["logprobs"]
for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
    if not (chosen <= 0 and len(top) >= 1 and abs(max(top.values()) - chosen) < 1e-9):
        fail(f"logprobs: {lp}")
print("logprobs: the chosen token is the top one, log-probabilities <= 0")

# Sampling with a seed repeats itself.
a = server.complete({"prompt": PROMPTS[1], "max_tokens": 8, "temperature": 0.9, "seed": 7})[1]
b = server.complete({"prompt": PROMPTS[1], "max_tokens": 8, "temperature": 0.9, "seed": 7})[1]
if a["choices"][0]["token_ids"] != b["choices"][0]["token_ids"]:
    fail("the same seed sampled differently")
print("a seed reproduces a sampled reply")

# Chat: the messages through the tokenizer's chat template (kiln-tokenize
# renders the same ids), the reply as an assistant message or deltas.
chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "안녕? What's 🚀"}]
tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kiln-chat-{os.getpid()}.json"), "w") as f:
    json.dump([{"messages": chat, "add_generation_prompt": True, "extra": {"tools": tools}}], f)
    chat_file = f.name
rendered = json.loads(subprocess.run(["kiln-tokenize", TOK, "--chat-json", chat_file], check=True,
                                     capture_output=True).stdout)
os.remove(chat_file)
chat_reference = until_eos(kiln_run(rendered["ids"], 10))
status, body = server.complete_at("/v1/chat/completions", {"messages": chat, "tools": tools,
                                                           "max_tokens": 10, "temperature": 0})
choice = body["choices"][0] if status == 200 else {}
if status != 200 or choice["token_ids"] != chat_reference or body["object"] != "chat.completion" \
        or choice["message"]["role"] != "assistant" or \
        body["usage"]["prompt_tokens"] != len(rendered["ids"]):
    fail(f"chat: {status} {body} against {chat_reference}")
events = server.stream_at("/v1/chat/completions", {"messages": chat, "tools": tools,
                                                   "max_tokens": 10, "temperature": 0})
chunks = [json.loads(e) for e in events[:-1]]
if chunks[0]["choices"][0]["delta"].get("role") != "assistant" or \
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) != \
        choice["message"]["content"] or chunks[0]["object"] != "chat.completion.chunk":
    fail(f"chat stream: {chunks}")
status, body = server.complete_at("/v1/chat/completions",
                                  {"messages": [{"role": "robot", "content": "beep"}]})
if status != 400 or "Unknown role: robot" not in body["error"]["message"]:
    fail(f"chat with a role the template refuses: {status} {body}")
print("chat: the template's prompt, kiln-run's tokens, a message or deltas; the template's "
      "refusal is a 400")

# Bad requests: 400 naming the field, with a message saying what is wrong.
SERVED = json.loads(server.request("GET", "/v1/models")[1])["data"][0]
CONTEXT = SERVED["max_model_len"]
for path, body, param, said in [
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens",
         f"expected an integer in 1..{CONTEXT}, found 0"),
        ("/v1/completions", {"prompt": "x", "max_tokens": CONTEXT + 1}, "max_tokens",
         f"expected an integer in 1..{CONTEXT}, found {CONTEXT + 1}"),
        ("/v1/completions", {"prompt": [5] * (CONTEXT - 100), "max_tokens": 200}, "max_tokens",
         f"{CONTEXT - 100} prompt tokens and 200 new ones need a context of {CONTEXT + 99}; "
         f"the server's holds {CONTEXT}"),
        ("/v1/completions", {"prompt": [5] * (CONTEXT + 1)}, "prompt",
         f"{CONTEXT + 1} prompt tokens are more than the server's context holds, {CONTEXT}"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * CONTEXT}]},
         "messages", f"prompt tokens are more than the server's context holds, {CONTEXT}"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature",
         "expected a number"),
        ("/v1/completions", {"prompt": "x", "frobnicate": 1}, "frobnicate",
         "not a field kiln-serve takes"),
        ("/v1/completions", {"prompt": [1, 99999]}, "prompt",
         "token ids must be integers in 0.."),
        ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, "model",
         f"this server serves '{SERVED['id']}' only")]:
    status, reply = server.complete_at(path, body)
    if status != 400 or reply["error"]["param"] != param or said not in reply["error"]["message"]:
        fail(f"{path} {json.dumps(body)[:200]}: {status} {reply}")
status, reply = server.request("POST", "/v1/completions", None)
if status != 400:
    fail(f"an empty body: {status}")
status, reply = server.request("POST", "/v1/completions", "{\"prompt\": [1, 2")
if status != 400 or b"the request body" not in reply:
    fail(f"malformed JSON: {status} {reply!r}")
status, reply = server.request("GET", "/v1/nowhere")
if status != 404 or b"no route GET /v1/nowhere" not in reply:
    fail(f"an unknown route: {status} {reply!r}")
# What `curl -d` sends without a Content-Type header: a form-encoded body,
# here over the 8 KiB that httplib would read of one; JSON all the same.
conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
conn.request("POST", "/v1/completions",
             json.dumps({"prompt": [i % 1000 + 1 for i in range(2000)], "max_tokens": 2,
                         "temperature": 0}),
             {"Content-Type": "application/x-www-form-urlencoded"})
response = conn.getresponse()
reply = response.read()
conn.close()
if response.status != 200 or len(json.loads(reply)["choices"][0]["token_ids"]) != 2:
    fail(f"a form-encoded JSON body of 10 KB: {response.status} {reply[:300]!r}")
print("bad requests: 400 naming the field and saying why (another model, a prompt or max_tokens "
      "past the context, malformed JSON), 404 naming an unknown route; a form-encoded JSON body "
      "is read")

# A client that goes away mid-stream frees its slot.
conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
conn.request("POST", "/v1/completions", json.dumps({"prompt": "go", "max_tokens": 3000,
                                                    "temperature": 0, "stream": True}))
response = conn.getresponse()
response.fp.readline()
conn.sock.close()
conn.close()
deadline = time.time() + 30
while True:
    m = server.metrics()
    if m['kiln_requests_total{status="cancelled"}'] == 1 and m["kiln_kv_slots_used"] == 0:
        break
    if time.time() > deadline:
        fail(f"the abandoned stream still holds its slot: {m}")
    time.sleep(0.05)
ok = m['kiln_requests_total{status="ok"}']
if ok != 9 + 4 + 1 + 1 + 2 + 2 + 1 or m['kiln_time_to_first_token_seconds_count'] < ok:
    fail(f"metrics: {m}")
# Every token after a request's first is one gap between consecutive tokens;
# each histogram's buckets grow and end at its count.
first = m["kiln_time_to_first_token_seconds_count"]
if m["kiln_time_per_output_token_seconds_count"] != m["kiln_generation_tokens_total"] - first:
    fail(f"TPOT counts {m['kiln_time_per_output_token_seconds_count']} gaps for "
         f"{m['kiln_generation_tokens_total']} tokens of {first} requests")
for name in ("kiln_time_to_first_token_seconds", "kiln_time_per_output_token_seconds"):
    buckets = [v for k, v in m.items() if k.startswith(name + "_bucket")]
    if buckets != sorted(buckets) or buckets[-1] != m[name + "_count"] or \
            not 0 < m[name + "_sum"] < 60 * m[name + "_count"]:
        fail(f"{name}: buckets {buckets}, sum {m[name + '_sum']}, count {m[name + '_count']}")
print("a client gone mid-stream frees its slot; /metrics counts every request, its first "
      "token and every gap after it")
server.stop()

# Batched decode: one decode_batch call a step while the running requests are
# slots 0..n-1 (its kernels differ from decode's; kiln-check bounds that):
# each reply is whole, and its first token, from prefill, is kiln-run's.
server = Server("--decode", "batch")
results = {}
at_once(ask, zip(PROMPTS, LENGTHS))
for prompt, n in zip(PROMPTS, LENGTHS):
    status, body = results[prompt]
    ids = body["choices"][0]["token_ids"]
    if status != 200 or ids[0] != reference[prompt][0] or (len(ids) != n and ids[-1] != EOS):
        fail(f"batched {prompt!r}: {status} {ids} against {reference[prompt]}")
print("batched decode: 8 concurrent replies whole, each first token kiln-run's")
server.stop()

# Speculative decoding by lookup (an artifact with verify entries): with a
# verify call each (decode where nothing was drafted) the greedy replies are
# kiln-run's; with verify_batch for slots 0..n-1 they are whole and begin
# with kiln-run's token (its kernels differ from decode's, as decode_batch's
# do). Longer replies, so that tiny's repetitions give lookup drafts.
SPEC_LENGTHS = [40, 24, 33, 48, 17, 29, 36, 44]
spec_reference = {p: until_eos(kiln_run(PROMPT_IDS[p], n))
                  for p, n in zip(PROMPTS, SPEC_LENGTHS)}
try:
    server = Server("--speculate", "lookup", "--ngram-min", "1", "--decode", "each")
except SystemExit as refused:
    if "has no verify entry point" not in str(refused):
        raise
    server = None
    print("speculation: skipped (the artifact has no verify entry point)")
if server:
    counts = []
    for mode in ("each", "batch"):
        if mode == "batch":
            server = Server("--speculate", "lookup", "--ngram-min", "1", "--decode", "batch")
        results = {}
        at_once(ask, zip(PROMPTS, SPEC_LENGTHS))
        for prompt, n in zip(PROMPTS, SPEC_LENGTHS):
            status, body = results[prompt]
            ids = body["choices"][0]["token_ids"] if status == 200 else None
            want = spec_reference[prompt]
            if status != 200 or (mode == "each" and EXACT and ids != want) or \
                    ids[0] != want[0] or (len(ids) != n and ids[-1] != EOS):
                fail(f"speculative ({mode}) {prompt!r}: {status} {ids} against kiln-run's {want}")
        m = server.metrics()
        counts.append((int(m["kiln_spec_accepted_tokens_total"]),
                       int(m["kiln_spec_draft_tokens_total"])))
        server.stop()
    # Whether a lookup draft is accepted depends on the replies repeating
    # themselves (tiny's do; small's hardly do in 48 tokens). kiln-run's own
    # lookup speculation on the same prompts says whether there is anything
    # to accept: where it accepts a draft, the server must accept one too.
    own = [kiln_run_lookup(PROMPT_IDS[p], n) for p, n in zip(PROMPTS, SPEC_LENGTHS)]
    own_accepted, own_drafted = sum(a for a, _ in own), sum(d for _, d in own)
    if own_drafted > 0 and counts[0][1] == 0:
        fail(f"speculation: nothing drafted ({counts}) where kiln-run drafted {own_drafted}")
    if own_accepted > 0 and counts[0][0] == 0:
        fail(f"speculation: no draft accepted ({counts}) where kiln-run accepted "
             f"{own_accepted} of {own_drafted}")
    print("speculation (lookup): kiln-run's tokens with a verify call each, whole replies "
          "through verify_batch; drafts accepted: " +
          ", ".join(f"{a} of {d}" for a, d in counts) +
          f" (kiln-run --speculate lookup: {own_accepted} of {own_drafted})")

# Prefix reuse: the next turn of a conversation (its prompt, the reply and
# new text, as token ids) finds the first turn's tokens in the slot it left,
# prefills only the rest, and answers what a cold run answers; with
# --no-prefix-reuse nothing is found.
turn1 = tokenize("Plan the change to the parser:")
reused = {}
for reuse in (True, False):
    server = Server("--decode", "each", *([] if reuse else ["--no-prefix-reuse"]))
    status, body = server.complete({"model": MODEL, "prompt": turn1, "max_tokens": 20,
                                    "temperature": 0})
    reply = body["choices"][0]["token_ids"]
    if status != 200 or reply != until_eos(kiln_run(turn1, 20)):
        fail(f"first turn: {status} {body}")
    turn2 = turn1 + reply + tokenize(" now apply it to the lexer")
    status, body = server.complete({"model": MODEL, "prompt": turn2, "max_tokens": 12,
                                    "temperature": 0})
    want = until_eos(kiln_run(turn2, 12))
    got = body["choices"][0]["token_ids"] if status == 200 else []
    if status != 200 or (got != want if EXACT else got[:1] != want[:1]):
        fail(f"next turn (reuse {reuse}): {status} {body} against a cold run's {want}")
    reused[reuse] = int(server.metrics()["kiln_prefix_reused_tokens_total"])
    server.stop()
# The slot holds the first prompt and the reply but its last token (never fed).
if reused[True] != len(turn1) + len(reply) - 1 or reused[False] != 0:
    fail(f"prefix reuse: {reused} tokens reused, expected {len(turn1) + len(reply) - 1} and 0")
print(f"prefix reuse: the next turn prefills {len(turn2) - reused[True]} of its {len(turn2)} "
      "prompt tokens and answers as a cold run; --no-prefix-reuse prefills them all")

# Saved histories (paged KV caches, Scheduler.h): one at a time on the 4
# slots, sessions sharing a 48-token system prompt. A is cold; B finds the
# prompt only in A's slot, whose rings no longer hold its window, so B
# prefills it again and saves it there; C, D and E restore it and prefill
# only their own part. E takes A's slot, the least recently used, whose
# history is saved first; A's next turn restores it into another slot. Every
# reply is kiln-run's, cold (on a GPU, where a prompt prefilled in other
# chunks rounds differently, all but A's begin with kiln-run's token).
server = Server("--decode", "each")
if "saved histories" in server.process.banner:
    system = list(range(100, 148))  # three pages of 16
    sessions = {name: system + list(range(200 + 20 * i, 212 + 20 * i))
                for i, name in enumerate("ABCDE")}
    replies = {}
    for name in "ABCDE":
        status, body = server.complete({"prompt": sessions[name], "max_tokens": 8,
                                        "temperature": 0})
        replies[name] = body["choices"][0]["token_ids"] if status == 200 else []
        want = until_eos(kiln_run(sessions[name], 8))
        if replies[name] != want if EXACT or name == "A" else replies[name][:1] != want[:1]:
            fail(f"saved histories: session {name}: {status} {body} against {want}")
    turn2 = sessions["A"] + replies["A"] + [7, 8, 9]
    status, body = server.complete({"prompt": turn2, "max_tokens": 8, "temperature": 0})
    want = until_eos(kiln_run(turn2, 8))
    got = body["choices"][0]["token_ids"] if status == 200 else []
    if got != want if EXACT else got[:1] != want[:1]:
        fail(f"saved histories: A's next turn: {status} {body} against a cold run's {want}")
    m = server.metrics()
    found = len(sessions["A"]) + len(replies["A"]) - 1
    expected = {"kiln_prefix_reused_tokens_total": 3 * len(system) + found,
                "kiln_saved_histories_total": 3, "kiln_restored_histories_total": 4}
    counted = {name: int(m[name]) for name in expected}
    if counted != expected:
        fail(f"saved histories: /metrics says {counted}, expected {expected}")
    found_all = m["kiln_prefix_reused_tokens_total"]
    ratio = found_all / (found_all + m["kiln_prompt_tokens_total"])
    if abs(m["kiln_prefix_hit_ratio"] - ratio) > 1e-6:
        fail(f"saved histories: kiln_prefix_hit_ratio {m['kiln_prefix_hit_ratio']}, expected "
             f"{ratio} (found over found and prefilled)")
    print(f"saved histories: a shared system prompt saved once and restored for 3 sessions, a "
          f"session's history saved when its slot was taken and restored for its next turn "
          f"({found} tokens found); kiln-run's tokens")
    server.stop()
    # Four sessions sharing a 64-token prompt sent at once, prefilled one
    # chunk of 64 a step: whichever prefills it first stops there to save it
    # (a save point the others' admission set), and the others wait for that
    # save, then restore it; however the requests interleave, at least two
    # find it.
    server = Server("--decode", "each", "--prefill-tokens-per-step", "64")
    shared = list(range(300, 364))
    burst = [shared + list(range(400 + 20 * i, 410 + 20 * i)) for i in range(4)]
    got = {}

    def ask_burst(i):
        got[i] = server.complete({"prompt": burst[i], "max_tokens": 6, "temperature": 0})

    at_once(ask_burst, [(i,) for i in range(4)])
    for i in range(4):
        status, body = got[i]
        reply = body["choices"][0]["token_ids"] if status == 200 else []
        want = until_eos(kiln_run(burst[i], 6))
        if reply != want if EXACT else reply[:1] != want[:1]:
            fail(f"saved histories, at once: request {i}: {status} {body} against {want}")
    reused = int(server.metrics()["kiln_prefix_reused_tokens_total"])
    if reused < 2 * len(shared) or reused % len(shared) != 0:
        fail(f"saved histories, at once: {reused} prompt tokens found, expected a multiple of "
             f"{len(shared)}, at least two")
    print(f"saved histories, at once: 4 sessions sharing a 64-token prompt, {reused // 64} of "
          f"them found it; kiln-run's tokens")
server.stop()

# A full queue answers 429: 8 more long requests at once than there are
# slots, of which 1 may wait. The server gets an HTTP thread for every
# request: with the default 16, a device with 24 slots (small NVFP4 on a
# GPU) never saw more than 16 requests at once, so none waited and all 32
# were served (an H100, 2026-12-06). Long: a prompt whose greedy reply runs
# 64 tokens without EOS, so that each request holds its slot for 64 decode
# steps at least, however fast the device.
def long_reply_prompt(steps=64):
    for prompt in ["go"] + PROMPTS:
        if EOS not in kiln_run(tokenize(prompt), steps):
            return prompt
    fail(f"no prompt's greedy reply runs {steps} tokens without EOS")


long_prompt_429 = long_reply_prompt()
server = Server("--max-waiting", "1", "--http-threads", str(SLOTS + 16))
statuses = []


def long_request():
    statuses.append(server.complete({"prompt": long_prompt_429, "max_tokens": 1500,
                                     "temperature": 0})[0])


at_once(long_request, [()] * (SLOTS + 8))
if statuses.count(429) == 0 or statuses.count(200) < SLOTS or set(statuses) - {200, 429}:
    fail(f"statuses {sorted(statuses)}")
print(f"a full queue answers 429 ({statuses.count(200)} served, {statuses.count(429)} refused; "
      f"prompt {long_prompt_429!r})")
server.stop()
