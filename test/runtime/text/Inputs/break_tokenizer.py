"""Writes broken copies of a tokenizer folder, one fault each, into OUT/<name>:
  break_tokenizer.py GOOD_DIR OUT"""
import copy
import json
import os
import shutil
import sys

good, out = sys.argv[1], sys.argv[2]
tokenizer = json.load(open(os.path.join(good, "tokenizer.json"), encoding="utf-8"))
config = json.load(open(os.path.join(good, "tokenizer_config.json"), encoding="utf-8"))


def write(name, t, c=config):
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with open(os.path.join(out, name, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
    with open(os.path.join(out, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, ensure_ascii=False)


t = copy.deepcopy(tokenizer)
t["model"]["type"] = "WordPiece"
write("wordpiece", t)

t = copy.deepcopy(tokenizer)
t["model"]["merges"][3] = ["zz", "q"]
write("merge", t)

t = copy.deepcopy(tokenizer)
t["normalizer"] = {"type": "NFKC"}
write("normalizer", t)

t = copy.deepcopy(tokenizer)
t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"
write("behavior", t)

t = copy.deepcopy(tokenizer)
t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+"
write("pattern", t)

t = copy.deepcopy(tokenizer)
vocab = t["model"]["vocab"]
last = max(vocab, key=vocab.get)
vocab[last] = 5
write("duplicate", t)

c = dict(config)
c["bos_token"] = "<|nope|>"
write("bos", tokenizer, c)

os.makedirs(os.path.join(out, "missing"), exist_ok=True)
