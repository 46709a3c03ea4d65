"""A bounded load test of kiln-serve on loopback (issue 22, reliability).

  serve_load.py ARTIFACT [--requests N] [--clients N] [--seed S] [--oversized M]
                [-- SERVER FLAGS...]

Hundreds of requests, --clients at once, in a workload made here from --seed:
prompts that share prefixes (a system prompt, sessions whose turns grow), greedy
and seeded sampled replies, streamed and not. Clients cancel at random: a stream
closed after a few tokens, a request whose connection is closed before its
answer; some requests are malformed (400 expected); a 429 is retried. Then:

- every slot is back in the pool and nothing waits or runs (/metrics), and
  the request counters add up to the requests sent; with a paged KV cache
  only the slots' cached histories and the saved ones hold pages (/metrics:
  kiln_kv_pages_used is kiln_kv_pages_held), and none once the solo runs
  (without prefix reuse) and streams whose clients go away mid-stream are
  done; the saved histories
  (sessions continued in another slot, shared prefixes) are counted;
- every finished request's tokens equal a solo run's (the same request alone on
  a fresh server with --no-prefix-reuse --decode each), and every cancelled
  stream's tokens begin it;
- --oversized M: with a paged KV pool too small for a request of max_tokens
  M, that request is answered 400 naming the pool, and cached histories
  were forgotten to make room during the load (/metrics);
- SIGTERM while requests stream drains the server: /health says so, a new
  request is answered 503, the streams in flight (queued ones included)
  finish whole, and the server exits 0.

Each check prints one line; a failure exits non-zero saying what differed."""
import http.client
import json
import random
import signal
import socket
import sys
import threading
import time

from serve_process import ServeProcess

args = sys.argv[1:]
server_flags = args[args.index("--") + 1:] if "--" in args else []
args = args[:args.index("--")] if "--" in args else args
ARTIFACT = args[0]
option = lambda name, default: int(args[args.index(name) + 1]) if name in args else default
REQUESTS = option("--requests", 300)
CLIENTS = option("--clients", 64)
SEED = option("--seed", 1)
OVERSIZED = option("--oversized", 0)
VOCAB = 1000  # token ids drawn below tiny's vocabulary


servers = []


def fail(message):
    said = "".join("\nkiln-serve said:\n" + server.process.said() for server in servers)
    sys.exit("FAIL: " + message + said[-4000:])


class Server:
    def __init__(self, *flags):
        self.process = ServeProcess([ARTIFACT, "--weights", "synthetic:1", *flags])
        self.port = self.process.port
        servers.append(self)

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)

    def post(self, body):
        conn = self.connect()
        conn.request("POST", "/v1/completions", body if isinstance(body, str) else json.dumps(body),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data

    def metrics(self):
        return self.process.metrics()

    def wait(self):
        """Its exit status and all it said."""
        return self.process.wait()

    def stop(self):
        self.process.stop()


class Stream:
    """A streamed response's events as they come: take() reads token ids."""

    def __init__(self, response):
        self.response, self.buffer, self.finish = response, b"", None

    def take(self, keep=None):
        """The next `keep` token ids (all the rest when None)."""
        ids = []
        while keep is None or len(ids) < keep:
            while b"\n\n" not in self.buffer:
                chunk = self.response.read1(65536)
                if not chunk:
                    return ids
                self.buffer += chunk
            event, self.buffer = self.buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            body = json.loads(event[len(b"data: "):])
            if "error" in body:
                fail("a stream failed: " + json.dumps(body))
            choice = body["choices"][0]
            ids += choice.get("token_ids", [])
            self.finish = choice.get("finish_reason") or self.finish
        return ids


# The workload: sessions whose prompts share a system prompt and grow turn by
# turn, and lone prompts; every request a kind of client behaviour.
rng = random.Random(SEED)
system = [rng.randrange(1, VOCAB) for _ in range(40)]
sessions = [system + [rng.randrange(1, VOCAB) for _ in range(rng.randrange(4, 60))]
            for _ in range(24)]
work = []
for i in range(REQUESTS):
    if rng.random() < 0.7:
        s = rng.randrange(len(sessions))
        sessions[s] = sessions[s] + [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 40))]
        prompt = list(sessions[s])
    else:
        prompt = [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 200))]
    body = {"prompt": prompt, "max_tokens": rng.randrange(1, 40), "temperature": 0}
    if rng.random() < 0.25:
        body.update(temperature=0.8, top_p=0.9, seed=rng.randrange(1 << 30))
    kind = rng.choices(["whole", "stream", "cancel", "vanish", "bad"], [50, 20, 15, 10, 5])[0]
    if kind == "bad":
        body = rng.choice(['{"prompt": [1, 2', json.dumps(dict(body, max_tokens=-3)),
                           json.dumps(dict(body, prompt=[1] * 100000))])
    work.append({"i": i, "kind": kind, "body": body, "keep": rng.randrange(1, 4)})

server = Server(*server_flags)
results, retries, lock = {}, [0], threading.Lock()
queue = list(reversed(work))


def client():
    while True:
        with lock:
            if not queue:
                return
            item = queue.pop()
        kind, body = item["kind"], item["body"]
        while True:
            conn = server.connect()
            streamed = kind in ("stream", "cancel")
            payload = body if isinstance(body, str) else json.dumps(dict(body, stream=streamed))
            conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
            if kind == "vanish":
                # Gone before the answer: the server finishes the request
                # and fails to write it.
                conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
                results[item["i"]] = ("vanished", None, None)
                break
            try:
                response = conn.getresponse()
            except OSError as error:
                results[item["i"]] = (f"no answer: {error}", None, None)
                break
            if response.status == 429:
                response.read()
                conn.close()
                with lock:
                    retries[0] += 1
                time.sleep(0.05)
                continue
            if response.status != 200:
                results[item["i"]] = (response.status, response.read(), None)
            elif streamed:
                stream = Stream(response)
                ids = stream.take(item["keep"] if kind == "cancel" else None)
                results[item["i"]] = (200, ids, stream.finish if kind == "stream" else "cancelled")
            else:
                choice = json.loads(response.read())["choices"][0]
                results[item["i"]] = (200, choice["token_ids"], choice["finish_reason"])
            conn.close()
            break


started = time.time()
threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.time() - started

for item in work:
    status, ids, finish = results[item["i"]]
    if item["kind"] == "bad" and status != 400:
        fail(f"request {item['i']} (malformed) answered {status}, not 400: {ids!r:.300}")
    if item["kind"] in ("whole", "stream") and (status != 200 or finish not in ("length", "stop")):
        fail(f"request {item['i']} ({item['kind']}) answered {status} {finish}: {ids!r:.300}")
print(f"{REQUESTS} requests, {CLIENTS} at once, in {elapsed:.1f} s: "
      f"{sum(w['kind'] == 'cancel' for w in work)} streams cancelled, "
      f"{sum(w['kind'] == 'vanish' for w in work)} connections closed before the answer, "
      f"{sum(w['kind'] == 'bad' for w in work)} malformed (400), {retries[0]} retries after 429")

# Every slot back in the pool once the vanished requests' replies are done.
deadline = time.time() + 120
while True:
    m = server.metrics()
    slots = m["kiln_kv_slots_used"] + m["kiln_kv_slots_free"]
    if m["kiln_requests_running"] == 0 and m["kiln_requests_waiting"] == 0 and \
            m["kiln_kv_slots_free"] == slots:
        break
    if time.time() > deadline:
        fail(f"slots still held after the load: {m}")
    time.sleep(0.1)
counted = sum(m[f'kiln_requests_total{{status="{s}"}}']
              for s in ("ok", "error", "rejected", "cancelled"))
if counted != REQUESTS + retries[0]:
    fail(f"/metrics counts {counted} requests; {REQUESTS} were sent and {retries[0]} retried: {m}")
cancelled = int(m['kiln_requests_total{status="cancelled"}'])
if cancelled == 0:
    fail("no request was counted cancelled")
print(f"after the load: {int(slots)} of {int(slots)} slots free, none running or waiting; "
      f"/metrics counts every request "
      f"({cancelled} cancelled)")
if m["kiln_kv_pages_used"] + m["kiln_kv_pages_free"] > 0:
    # Nothing runs: every page taken is one that a slot's cached history or
    # a saved history holds (kiln_kv_pages_held counts them from their page
    # lists); a page that a finished, cancelled or vanished request left
    # behind would be used and held by nothing.
    if m["kiln_kv_pages_used"] != m["kiln_kv_pages_held"]:
        fail(f"{int(m['kiln_kv_pages_used'] - m['kiln_kv_pages_held'])} KV pages lost: "
             f"{int(m['kiln_kv_pages_used'])} used, {int(m['kiln_kv_pages_held'])} held by "
             f"cached and saved histories")
    print(f"paged KV after the load: every page used is a cached or saved history's "
          f"({int(m['kiln_kv_pages_used'])} of {int(m['kiln_kv_pages_used'] + m['kiln_kv_pages_free'])})")
if m["kiln_saved_histories_total"] > 0:
    # Paged KV: slots' histories saved when other sessions took the slots,
    # shared prefixes saved, and requests that continued them elsewhere.
    print(f"saved histories: {int(m['kiln_saved_histories_total'])} saved, "
          f"{int(m['kiln_restored_histories_total'])} restored into slots, "
          f"{int(m['kiln_saved_histories'])} kept")
if OVERSIZED:
    status, data = server.post({"prompt": [1, 2, 3], "max_tokens": OVERSIZED})
    if status != 400 or b"KV pages" not in data:
        fail(f"a request of max_tokens {OVERSIZED} answered {status}: {data[:300]!r}")
    evicted = server.metrics()["kiln_prefix_evictions_total"]
    if evicted == 0:
        fail("no cached history was forgotten for KV pages under the load")
    print(f"a small KV pool: {int(evicted)} cached histories forgotten to make room; a request "
          f"the pool cannot hold is a 400")
server.stop()

# Solo runs: each request alone on a fresh server, the plainest path.
solo_server = Server(*server_flags, "--no-prefix-reuse", "--decode", "each")
compared = 0
for item in work:
    status, ids, finish = results[item["i"]]
    if status != 200:
        continue
    status, data = solo_server.post(dict(item["body"], stream=False))
    if status != 200:
        fail(f"request {item['i']} alone answered {status}: {data[:300]!r}")
    alone = json.loads(data)["choices"][0]["token_ids"]
    if (finish == "cancelled" and alone[:len(ids)] != ids) or \
            (finish != "cancelled" and alone != ids):
        fail(f"request {item['i']} ({item['kind']}): {ids} under load, {alone} alone")
    compared += 1
print(f"{compared} replies under load are the solo runs' tokens (cancelled ones a prefix)")
# Clients that go away mid-stream on the server without prefix reuse: their
# requests end at the next step and give back every page they took.
for k in range(8):
    conn = solo_server.connect()
    conn.request("POST", "/v1/completions",
                 json.dumps({"prompt": [k + 3] * (40 + 20 * k), "max_tokens": 200, "stream": True}))
    if len(Stream(conn.getresponse()).take(2)) != 2:
        fail(f"disconnecting stream {k} got no tokens")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
# A reply's last bytes may reach us before the scheduler's next step frees
# its pages: wait for that step (a busy machine may take a while), not for
# ever.
deadline = time.time() + 30
while True:
    pages = solo_server.metrics()
    total = pages["kiln_kv_pages_used"] + pages["kiln_kv_pages_free"]
    if total == 0 or pages["kiln_kv_pages_used"] == 0:
        break
    if time.time() > deadline:
        fail(f"KV pages still held after the solo runs: {pages}")
    time.sleep(0.05)
if total > 0:
    print(f"paged KV: after the solo runs and 8 streams whose clients went away every page is "
          f"free ({int(pages['kiln_kv_pages_free'])} of {int(total)})")

# SIGTERM drains: streams in flight finish whole, new requests get 503.
DRAINED_TOKENS = 160
streams, outcomes = [], {}


def drained(k):
    conn = solo_server.connect()
    conn.request("POST", "/v1/completions",
                 json.dumps({"prompt": [k + 1, 7, 9], "max_tokens": DRAINED_TOKENS, "stream": True}))
    stream = Stream(conn.getresponse())
    with lock:
        streams.append(k)
    ids = stream.take()
    outcomes[k] = (ids, stream.finish)


threads = [threading.Thread(target=drained, args=(k,)) for k in range(12)]
for t in threads:
    t.start()
# Once every stream has its answer's head (accepted: eight decoding, four
# queued for a slot), the signal.
while len(streams) < 12:
    time.sleep(0.005)
counted = solo_server.metrics()
solo_server.process.signal(signal.SIGTERM)
while True:
    conn = solo_server.connect()
    conn.request("GET", "/health")
    health = conn.getresponse()
    said = health.read()
    conn.close()
    if health.status == 503:
        break
    time.sleep(0.002)
if b"draining" not in said:
    fail(f"/health while draining: {said!r}")
late, said = solo_server.post({"prompt": [1, 2, 3], "max_tokens": 4})
if late != 503 or b"shutting down" not in said:
    fail(f"a request while draining answered {late}: {said[:300]!r}")
refused = solo_server.metrics()['kiln_requests_total{status="rejected"}'] - \
    counted['kiln_requests_total{status="rejected"}']
if refused != 1:
    fail(f"/metrics counted {refused} rejected requests for the drain's one 503")
drained_early = len(outcomes)
for t in threads:
    t.join()
status, said = solo_server.wait()
if status != 0 or "kiln-serve: stopped" not in said:
    fail(f"kiln-serve did not stop cleanly after draining ({status})")
if len(outcomes) != 12:
    fail(f"{12 - len(outcomes)} streams got no answer after SIGTERM")
for k, (ids, finish) in outcomes.items():
    if len(ids) != DRAINED_TOKENS or finish != "length":
        fail(f"stream {k} was cut by SIGTERM: {len(ids)} tokens, finish {finish}")
if drained_early == len(outcomes):
    fail("every stream had finished before the drain was seen")
print(f"SIGTERM: /health says draining, a new request gets 503 (counted rejected), {len(outcomes)} streams in "
      f"flight finish whole, then the server exits 0")
