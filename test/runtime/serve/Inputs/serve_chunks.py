"""Chunked prefill interleaved with decoding, as /metrics sees it.

  serve_chunks.py ARTIFACT [kiln-serve flags...]

Starts kiln-serve with a budget of 64 prompt tokens a step (no tokenizer, so
no EOS ends a reply early). While one request decodes a long reply, a
640-token prompt arrives: it must be prefilled in ten chunks of 64, each in
a step that also decodes the first request (kiln_step_prompt_tokens,
kiln_steps_prefill_and_decode_total), and the first request's tokens keep
coming meanwhile. Then two 100-token prompts at once share the budget: no
step prefills more than 64 tokens. Each check prints one line; a failure
exits non-zero saying what differed."""
import http.client
import json
import sys
import threading
import time

from serve_process import ServeProcess, fail

BUDGET = 64
server = ServeProcess([sys.argv[1], "--weights", "synthetic:1", "--prefill-tokens-per-step",
                       str(BUDGET), *sys.argv[2:]])


def connect():
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)


metrics = server.metrics


def complete(prompt):
    conn = connect()
    conn.request("POST", "/v1/completions",
                 json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 200:
        fail(f"a prompt of {len(prompt)} tokens: {response.status} {body[:300]!r}")


# The long reply, read as it streams: its token count so far.
LONG_REPLY = 600
streamed = [0]
first_token = threading.Event()
finish = []


def stream_long_reply():
    conn = connect()
    conn.request("POST", "/v1/completions",
                 json.dumps({"prompt": [7, 8, 9], "max_tokens": LONG_REPLY, "temperature": 0,
                             "stream": True}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    buffer = b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: {"):
                choice = json.loads(event[len(b"data: "):])["choices"][0]
                streamed[0] += len(choice.get("token_ids", []))
                if choice.get("finish_reason"):
                    finish.append(choice["finish_reason"])
                first_token.set()
    conn.close()


reader = threading.Thread(target=stream_long_reply)
reader.start()
if not first_token.wait(120):
    fail("the long reply's first token never came")
# The step that prefilled its 3 prompt tokens is counted once it ends, which
# may be after its first token reached us.
deadline = time.time() + 60
while metrics()["kiln_step_prompt_tokens_sum"] != 3:
    if time.time() > deadline:
        fail(f"the long reply's prefill step was not counted: {metrics()}")
    time.sleep(0.005)
before, streamed_before = metrics(), streamed[0]
complete([i % 1000 + 1 for i in range(640)])
streamed_after = streamed[0]


def settled(prompt_tokens):
    """/metrics once the steps that prefilled `prompt_tokens` more are counted
    (a step is counted as it ends, after its tokens went out)."""
    deadline = time.time() + 60
    while True:
        now = metrics()
        if now["kiln_step_prompt_tokens_sum"] - before["kiln_step_prompt_tokens_sum"] >= \
                prompt_tokens or time.time() > deadline:
            return now


after = settled(640)
delta = lambda name: after[name] - before[name]
bucket = lambda le: delta(f'kiln_step_prompt_tokens_bucket{{le="{le}"}}')
if finish:
    fail(f"the long reply ended ({finish}) before the long prompt was prefilled")
if delta("kiln_prompt_tokens_total") != 640 or delta("kiln_step_prompt_tokens_count") != 10 or \
        bucket(BUDGET) != 10 or bucket(BUDGET // 2) != 0:
    fail(f"640 prompt tokens: {delta('kiln_prompt_tokens_total')} prefilled in "
         f"{delta('kiln_step_prompt_tokens_count')} steps, {bucket(BUDGET)} of at most {BUDGET}, "
         f"{bucket(BUDGET // 2)} of at most {BUDGET // 2}")
if delta("kiln_steps_prefill_and_decode_total") != 10:
    fail(f"{delta('kiln_steps_prefill_and_decode_total')} of the 10 chunks' steps also decoded "
         f"the running reply")
if streamed_after - streamed_before < 5:
    fail(f"the running reply streamed {streamed_after - streamed_before} tokens while a "
         f"640-token prompt was prefilled")
print(f"a 640-token prompt: 10 chunks of {BUDGET}, each in a step that also decoded the running "
      f"reply, which streamed on meanwhile")
reader.join()
if finish != ["length"] or streamed[0] != LONG_REPLY:
    fail(f"the long reply: {streamed[0]} tokens, finish {finish}")

# Two prompts at once share a step's budget.
before = metrics()
threads = [threading.Thread(target=complete, args=([k + 2] * 100,)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
after = settled(200)
if delta("kiln_prompt_tokens_total") != 200 or \
        delta("kiln_step_prompt_tokens_sum") != 200 or \
        bucket(BUDGET) != delta("kiln_step_prompt_tokens_count"):
    fail(f"two prompts of 100 tokens: {delta('kiln_step_prompt_tokens_sum')} prompt tokens in "
         f"{delta('kiln_step_prompt_tokens_count')} steps, {bucket(BUDGET)} of at most {BUDGET}")
print(f"two 100-token prompts at once: {int(delta('kiln_step_prompt_tokens_count'))} steps, none "
      f"over {BUDGET} prompt tokens")
server.stop()
