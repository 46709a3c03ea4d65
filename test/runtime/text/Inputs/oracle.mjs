// The independent tokenizer the tests compare Kiln's with: Hugging Face's
// tokenizers.js (@huggingface/tokenizers, from npm). Reads a tokenizer folder
// and a JSON array of texts; prints one JSON line per text:
//   {"ids": [...], "decoded": "...", "skipped": "..."}
// (`ids` with the post-processor's special tokens, `decoded` of those ids with
// special tokens kept, `skipped` without them).
//   node oracle.mjs TOKENIZER_DIR TEXTS.json [NODE_MODULES_DIR]
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [dir, textsPath, modules] = process.argv.slice(2);
const require = createRequire(path.join(modules ?? process.cwd(), "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
);
for (const text of JSON.parse(readFileSync(textsPath, "utf8"))) {
  const ids = tokenizer.encode(text).ids;
  console.log(JSON.stringify({
    ids,
    decoded: tokenizer.decode(ids, { skip_special_tokens: false }),
    skipped: tokenizer.decode(ids, { skip_special_tokens: true }),
  }));
}
