// The chat templates the tests render, through Hugging Face's Jinja for
// JavaScript (@huggingface/jinja, npm) and tokenized by tokenizers.js
// without special tokens, as transformers' apply_chat_template does. Prints
// a JSON line per chat: {"text", "ids"} or {"error"}.
//   node chat_oracle.mjs TOKENIZER_DIR CHATS.json NODE_MODULES_DIR
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [dir, chatsPath, modules] = process.argv.slice(2);
const require = createRequire(path.join(modules, "package.json"));
const { Template } = require("@huggingface/jinja");
const { Tokenizer } = require("@huggingface/tokenizers");
const config = JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")), config);
const template = new Template(config.chat_template);
for (const chat of JSON.parse(readFileSync(chatsPath, "utf8"))) {
  try {
    const text = template.render({
      ...(chat.extra ?? {}),
      messages: chat.messages,
      add_generation_prompt: chat.add_generation_prompt ?? false,
      bos_token: config.bos_token,
      eos_token: config.eos_token,
    });
    console.log(JSON.stringify({ text, ids: tokenizer.encode(text, { add_special_tokens: false }).ids }));
  } catch (error) {
    console.log(JSON.stringify({ error: String(error.message ?? error) }));
  }
}
