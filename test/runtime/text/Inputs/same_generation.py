"""kiln-run given a text prompt and kiln-run given that text's ids (from
kiln-tokenize) agree: the same tokens, and the text the first printed as they
streamed is the tokenizer's decoding of the second's tokens (special tokens
skipped), up to and without the EOS token.
  same_generation.py TOKENIZER_DIR ARTIFACT TEXT NEW_TOKENS [--prompt-file]

With --prompt-file, TEXT is a file's path: its text is tokenized, and the
first run reads it with kiln-run --prompt-file."""
import json
import subprocess
import sys

tok, artifact, text, new = sys.argv[1:5]
from_file = "--prompt-file" in sys.argv[5:]
path = text
if from_file:
    with open(path, encoding="utf-8") as f:
        text = f.read()


def run(*args):
    return subprocess.run(list(args), capture_output=True, check=True).stdout


prompt = json.loads(run("kiln-tokenize", tok, "--text", text))
weights = ["--weights", "synthetic:1", "--max-new-tokens", new]
by_ids = run("kiln-run", artifact, *weights, "--prompt-ids", ",".join(map(str, prompt)))
ids = [int(x) for x in by_ids.decode().splitlines()[0].split(",")]
info = run("kiln-tokenize", tok, "--info").decode()
eos = int([l.split(": ")[1] for l in info.splitlines() if l.startswith("eos:")][0])
if eos in ids:
    ids = ids[: ids.index(eos) + 1]
decoded = run("kiln-tokenize", tok, "--decode", ",".join(map(str, ids)), "--no-special")
by_text = run("kiln-run", artifact, *weights, "--tokenizer", tok,
              *(["--prompt-file", path] if from_file else ["--prompt", text]))
printed = by_text.split(b"\ntime to first token")[0].removesuffix(b"\n(stopped at the EOS token)")
if printed != decoded:
    sys.exit(f"printed {printed!r}\ndecoded {decoded!r}")
print(f"the text is the decoded tokens ({len(prompt)} prompt tokens, {len(ids)} new, "
      f"{len(decoded)} bytes)")
