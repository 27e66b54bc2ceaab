// Prints what the independent parser @huggingface/gguf reads from a GGUF file, as JSON:
// { version, tensor_count, kv_count, tensor_data_offset,
//   metadata: { key: { type, subType?, value } }, tensors: [{ name, n_dims, shape, dtype, offset }] }
// 64-bit integers (BigInt) are printed as decimal strings; non-finite floats as strings.
// Run from a folder whose node_modules holds @huggingface/gguf@0.4.6 (the test copies it there).
import { gguf } from "@huggingface/gguf";

const file = process.argv[2];
const { typedMetadata, tensorInfos, tensorDataOffset } = await gguf(file, {
  allowLocalFile: true,
  typedMetadata: true,
});
const replacer = (_key, v) => {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number" && !Number.isFinite(v)) return String(v);
  return v;
};
const { version, tensor_count, kv_count, ...metadata } = typedMetadata;
const out = {
  version: version.value,
  tensor_count: tensor_count.value,
  kv_count: kv_count.value,
  tensor_data_offset: tensorDataOffset,
  metadata,
  tensors: tensorInfos,
};
process.stdout.write(JSON.stringify(out, replacer));
