"""Writes a small byte-level BPE tokenizer in Hugging Face's format
(tokenizer.json, tokenizer_config.json) into a folder, for the tokenizer tests:
merges learnt from a multilingual corpus, Llama 4's pre-tokenizer pattern,
added and special tokens, a BOS post-processor and a chat template.

  make_tokenizer.py DIR [--ignore-merges] [--string-merges] [--merges N]
                    [--grow-to N]      (more merges, up to N BPE tokens)
                    [--vocab-size N]   (reserved special tokens up to N ids)
                    [--chat-template FILE]

--grow-to builds a vocabulary of a real model's size (Llama 4's and Muse
Spark's: 200000 BPE tokens, then reserved special tokens up to 202048) from
merges made up after the learnt ones: seeded random words of the corpus's
scripts built up byte by byte, and random pairs of tokens already there.
"""
import argparse
import collections
import json
import os
import re

# Llama 4's pre-tokenizer pattern (o200k-style: case-aware words with their
# contractions, digits in threes, punctuation runs, newlines, spaces).
PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS = """
The quick brown fox jumps over the lazy dog. It's what they'd say, isn't it?
def compile(model, target="sm_90a"):  # returns the artifact
    for layer in range(62):
        plan.append(layer * 2 + 1)
    return {"ok": True, "tokens": [1, 2, 3]}
Kiln compiles Muse Spark Open into per-hardware artifacts and runs them.
The mixture of experts routes each token to eight of 256 experts.
안녕하세요, 세계! 뮤즈 스파크는 전문가 혼합 모델입니다.
你好，世界！这是一个混合专家模型，每个词元选择八个专家。
Grüße aus Köln — naïve café, résumé, façade. Ελληνικά και русский текст.
Emoji: 🚀🔥 and ✨ mixed with text 😀 👩‍💻.
numbers 1234567 3.14159 2026-12-02 0x7f00 1e-5
    indented    spaces\tand\ttabs
multiple


newlines and trailing spaces   
"""


def bytes_to_unicode():
    """GPT-2's map of the 256 bytes onto printable characters."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def words(text):
    # An approximation of the pattern (Python's re has no \p{..}): merges
    # need only be consistent, not what the real pattern would learn.
    return re.findall(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\w\s]+|\s+", text)


def grow(vocab, merges, size, byte_map):
    """Merges appended until the vocabulary holds `size` tokens: a valid BPE
    (each merge joins two tokens of the vocabulary into a new one), ranked
    after the learnt merges, so that text still meets those first."""
    import random
    rng = random.Random(202048)
    alphabet = sorted(set(CORPUS) - set("\n"))
    tokens = list(vocab)
    while len(vocab) < size:
        if rng.random() < 0.5:
            # A word of the corpus's characters, built up byte by byte.
            word = ("" if rng.random() < 0.3 else " ") + "".join(
                rng.choice(alphabet) for _ in range(rng.randrange(2, 9)))
            chars = [byte_map[b] for b in word.encode("utf-8")]
            piece = chars[0]
            for c in chars[1:]:
                merged = piece + c
                if merged not in vocab and len(vocab) < size:
                    merges.append((piece, c))
                    vocab[merged] = len(vocab)
                    tokens.append(merged)
                if merged not in vocab:
                    break
                piece = merged
        else:
            # Two tokens already there, joined.
            a, b = rng.choice(tokens), rng.choice(tokens)
            if a + b not in vocab and len(a + b) <= 24:
                merges.append((a, b))
                vocab[a + b] = len(vocab)
                tokens.append(a + b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--ignore-merges", action="store_true")
    parser.add_argument("--string-merges", action="store_true")
    parser.add_argument("--merges", type=int, default=600)
    parser.add_argument("--vocab-size", type=int, default=0)
    parser.add_argument("--grow-to", type=int, default=0)
    parser.add_argument("--chat-template")
    args = parser.parse_args()

    byte_map = bytes_to_unicode()
    counts = collections.Counter(words(CORPUS))
    pieces = {w: [byte_map[b] for b in w.encode("utf-8")] for w in counts}
    vocab = {byte_map[b]: i for i, b in enumerate(sorted(byte_map))}
    merges = []
    for _ in range(args.merges):
        pairs = collections.Counter()
        for w, count in counts.items():
            p = pieces[w]
            for a, b in zip(p, p[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merged = best[0] + best[1]
        merges.append(best)
        if merged not in vocab:
            vocab[merged] = len(vocab)
        for w in counts:
            p, out, i = pieces[w], [], 0
            while i < len(p):
                if i + 1 < len(p) and (p[i], p[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(p[i])
                    i += 1
            pieces[w] = out

    grow(vocab, merges, args.grow_to, byte_map)

    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>",
               "<|eot|>"]
    added = []
    for name in special:
        added.append({"id": len(vocab) + len(added), "content": name, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    # A token added to the vocabulary that is not special (kept in decoded text).
    added.append({"id": len(vocab) + len(added), "content": "<tool_call>", "single_word": False,
                  "lstrip": False, "rstrip": False, "normalized": False, "special": False})
    # Reserved special tokens up to the model's vocabulary, as Llama 4 pads.
    while len(vocab) + len(added) < args.vocab_size:
        added.append({"id": len(vocab) + len(added),
                      "content": f"<|reserved_special_token_{len(added)}|>", "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    bos = added[0]["id"]

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False},
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
            "byte_fallback": False, "ignore_merges": args.ignore_merges,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges] if args.string_merges
                      else [[a, b] for a, b in merges],
        },
    }
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot|>",
        "add_bos_token": True,
        "model_max_length": 1048576,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if args.chat_template:
        with open(args.chat_template, encoding="utf-8") as f:
            config["chat_template"] = f.read()
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
