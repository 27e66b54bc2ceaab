// Evaluates a token list with the llama.cpp inside npm node-llama-cpp (its prebuilt CPU
// binaries; never a source build or a download) and writes what
// llama_crosscheck.py (same folder) compares with ds4 and the reference.
//
//   node llama_logits.mjs NPM_PREFIX MODEL.gguf TOKENS.json OUT_DIR [GREEDY_N] [KV_TYPE]
//
// NPM_PREFIX: folder whose node_modules holds node-llama-cpp (scripts/npm-install.sh).
// MODEL.gguf: a GGUF in llama.cpp's deepseek4 dialect (llama_compat.py).
// TOKENS.json: JSON array of prompt token ids, evaluated as given (no BOS is added).
// GREEDY_N: greedy tokens to generate after the prompt (default 0).
// KV_TYPE: llama.cpp KV-cache type, F16 (llama.cpp's default) or F32.
// Writes OUT_DIR/logprobs.f32: float32 [n_positions, n_vocab] row-major, ln p of every
//   vocabulary entry after each fed token (n_positions = prompt + GREEDY_N - 1). node-llama-cpp
//   exposes logits only as softmax probabilities, computed in f32 from the unmodified logits
//   (temperature 0 selects llama.cpp's greedy sampler, which leaves them as they are), so
//   ln p = logit - logsumexp(logits): the logits up to one constant per position.
// and OUT_DIR/meta.json: {n_vocab, prompt_len, n_positions, greedy, argmax, seconds, kv_type,
//   llama_cpp}. Exit 1 with a message when the model cannot be loaded or evaluated, 2 on bad
//   arguments.
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const [prefix, modelPath, tokensPath, outDir, greedyArg = "0", kvType = "F16"] = process.argv.slice(2);
const usage = "usage: node llama_logits.mjs NPM_PREFIX MODEL.gguf TOKENS.json OUT_DIR [GREEDY_N] [F16|F32]";
if (!prefix || !modelPath || !tokensPath || !outDir) { console.error(usage); process.exit(2); }
const greedyN = Number(greedyArg);
if (!Number.isInteger(greedyN) || greedyN < 0 || !["F16", "F32"].includes(kvType)) {
  console.error(usage);
  process.exit(2);
}
const prompt = JSON.parse(fs.readFileSync(tokensPath, "utf8"));
if (!Array.isArray(prompt) || prompt.length === 0 || !prompt.every(Number.isInteger)) {
  console.error(`${tokensPath}: expected a non-empty JSON array of token ids`);
  process.exit(2);
}

// node-llama-cpp is ESM-only and lives outside this script's folder: resolve it from the prefix.
const entry = createRequire(path.resolve(prefix, "package.json")).resolve("node-llama-cpp");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);

const errors = [];
const llama = await getLlama({
  build: "never", gpu: false, logLevel: LlamaLogLevel.warn,
  logger: (level, message) => { if (level === "error") errors.push(String(message).trim()); },
});
let model;
try {
  model = await llama.loadModel({modelPath, gpuLayers: 0});
} catch (e) {
  console.error(`llama.cpp could not load ${modelPath}: ${e.message}\n${errors.join("\n")}`);
  process.exit(1);
}
const nVocab = model.fileInfo.metadata?.deepseek4?.vocab_size ?? model.tokens.ggufVocabSize;
const context = await model.createContext({
  contextSize: prompt.length + greedyN + 16, batchSize: 512, threads: 1, flashAttention: false,
  experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
});
const sequence = context.getSequence();

const rows = [];
const argmax = [];
function record(result) {
  const probs = result?.next?.probabilities;
  if (!probs || probs.size !== nVocab) throw new Error(`position ${rows.length}: expected ${nVocab} probabilities`);
  const row = new Float32Array(nVocab);
  for (const [tok, p] of probs) row[tok] = Math.log(p);
  rows.push(row);
  argmax.push(result.next.token);
}
const want = {generateNext: {probabilities: true, token: true}};
const t0 = performance.now();
(await sequence.controlledEvaluate(prompt.map((t) => [t, want]))).forEach(record);
const greedy = [];
for (let i = 0; i < greedyN; ++i) {
  greedy.push(argmax[argmax.length - 1]);
  if (i + 1 < greedyN) record((await sequence.controlledEvaluate([[greedy[i], want]]))[0]);
}
const seconds = (performance.now() - t0) / 1000;

fs.mkdirSync(outDir, {recursive: true});
const out = Buffer.alloc(rows.length * nVocab * 4);
rows.forEach((r, i) => Buffer.from(r.buffer).copy(out, i * nVocab * 4));
fs.writeFileSync(path.join(outDir, "logprobs.f32"), out);
fs.writeFileSync(path.join(outDir, "meta.json"), JSON.stringify({
  n_vocab: nVocab, prompt_len: prompt.length, n_positions: rows.length, greedy, argmax, seconds,
  kv_type: kvType, llama_cpp: llama.llamaCppRelease,
}));
console.log(`llama.cpp ${llama.llamaCppRelease?.release ?? "?"}: ${rows.length} positions, ` +
            `n_vocab ${nVocab}, KV ${kvType}, ${seconds.toFixed(1)} s`);
await context.dispose();
await model.dispose();
