"""kiln-serve --nproc 2 on a two-rank artifact, as a client sees it.

  serve_ranks.py ARTIFACT

- concurrent greedy requests (batched decode, a prefix reused by a later
  turn) give kiln-run --nproc 2's tokens;
- a follower that dies fails the engine: the request in flight gets an
  error naming the rank, /health answers 503, and the launcher reports the
  rank killed and exits non-zero.

Each check prints one line; a failure exits non-zero saying what differed."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading

from serve_process import ServeProcess

ARTIFACT = sys.argv[1]
RANKS = ["--nproc", "2", "--threads", "1"]


def fail(message):
    sys.exit("FAIL: " + message)


def start(env=None):
    server = ServeProcess([ARTIFACT, "--weights", "synthetic:1", *RANKS], env=env)
    pids = {int(r): int(p) for r, p in re.findall(r"rank (\d+) of 2 is pid (\d+)", server.banner)}
    return server, server.port, pids, server.banner


def post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", json.dumps(body))
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data)


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data.decode()


def kiln_run(ids, new):
    out = subprocess.run(["kiln-run", ARTIFACT, "--weights", "synthetic:1", "--prompt-ids",
                          ",".join(map(str, ids)), "--max-new-tokens", str(new), *RANKS],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.splitlines()[0].split(",")]


server, port, pids, said = start()
if "(rank 0 of 2)" not in said:
    fail("rank 0 did not say it serves a job of two: " + said)
# As many as the artifact's slots (4), so that no finished one's slot is
# taken by another before the next turn.
prompts = [[1, 2, 3, 4, 5], [9, 8, 7], list(range(10, 60)), [4] * 20]
lengths = [12, 20, 9, 16]
results = {}


def ask(i):
    results[i] = post(port, {"prompt": prompts[i], "max_tokens": lengths[i], "temperature": 0})


threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
for t in threads:
    t.start()
for t in threads:
    t.join()
# The next turn of the third conversation: its prompt repeats the last one
# and the reply, so rank 0 rolls a slot back and both ranks prefill the rest.
third = results[2][1]["choices"][0]["token_ids"]
turn = prompts[2] + third + [61, 62, 63]
status, body = post(port, {"prompt": turn, "max_tokens": 10, "temperature": 0})
metrics = get(port, "/metrics")[1]
reused = float(re.search(r"^kiln_prefix_reused_tokens_total (\S+)", metrics, re.M).group(1))
for i in range(len(prompts)):
    got = results[i][1]["choices"][0]["token_ids"] if results[i][0] == 200 else results[i]
    want = kiln_run(prompts[i], lengths[i])
    if got != want:
        fail(f"request {i}: {got} from kiln-serve --nproc 2, {want} from kiln-run --nproc 2")
want = kiln_run(turn, 10)
if status != 200 or body["choices"][0]["token_ids"] != want:
    fail(f"the next turn: {status} {body} against kiln-run's {want}")
if reused < len(prompts[2]):
    fail(f"the next turn reused {reused} prompt tokens")
print(f"{len(prompts)} concurrent requests and a next turn ({int(reused)} prompt tokens reused) "
      "give kiln-run --nproc 2's tokens")
server.stop()
print("SIGTERM to the launcher: rank 0 drains and stops, rank 1 with it, exit 0")

# A follower killed: rank 0's next collective fails.
server, port, pids, said = start({"KILN_COMM_TIMEOUT": "5"})
os.kill(pids[1], signal.SIGKILL)
status, body = post(port, {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0})
message = json.dumps(body)
if status != 500 or "rank 1" not in message:
    fail(f"a request after rank 1 died answered {status}: {message}")
health = get(port, "/health")
if health[0] != 503:
    fail(f"/health after rank 1 died: {health}")
server.signal(signal.SIGTERM)
status, rest = server.wait()
if status == 0 or f"rank 1 (pid {pids[1]}) was killed by signal 9" not in rest:
    fail(f"the launcher after rank 1 died: exit {status}: {rest}")
print("rank 1 killed: the request fails naming it, /health 503, the launcher reports it and "
      "exits non-zero")
