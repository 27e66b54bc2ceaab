#!/bin/bash
# xllama (issue 7 item 2B): transformers DeepseekV4ForCausalLM vs ds4 and the reference.
# Makes the f32 tiny models here (116 MB each, too big to carry), dumps ds4's logits (CPU),
# runs tools/reference/hf_crosscheck.py (transformers on the GPU in float64, reference numpy).
# The copy of the device call behind docs/parity.md ("transformers"): run on the device as
# .device-xllama/run.sh with $OUT set, from a folder holding this script, ds4-make-model,
# ds4-dump-logits, lib/ (their non-system .so files), py/tools/reference/*.py, tokens.txt
# (the 600 prompt ids, comma-separated) and idx16.json ({"indexer_head_dim": 64, "n_indexer_head": 16}).
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib PYTHONPATH=$PWD/py OMP_NUM_THREADS=8
exec > >(tee $OUT/log) 2>&1
nvidia-smi -L
python3 -c "import sys, torch, transformers, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)"
MF=$(python3 -c "import transformers.models.deepseek_v4.modeling_deepseek_v4 as m; print(m.__file__)" 2>&1 | tail -1)
echo "modeling file: $MF"
if [ -f "$MF" ]; then
  cp "$MF" $OUT/modeling_deepseek_v4.py
  cp "$(dirname "$MF")/configuration_deepseek_v4.py" $OUT/ 2>/dev/null
  echo "grep fp8/fp4/hadamard/e4m3 in modeling:"; grep -n -i "fp8\|fp4\|hadamard\|e4m3\|act_quant" "$MF" | head -20
fi
t0=$(date +%s)
./ds4-make-model --preset tiny --recipe f32 --vocab ../models/deepseek-v3-tokenizer.json.zst --seed 1 -q -o m/std.gguf
./ds4-make-model --preset tiny --recipe f32 --vocab ../models/deepseek-v3-tokenizer.json.zst --config idx16.json --seed 1 -q -o m/idx16.gguf
echo "make: $(( $(date +%s) - t0 )) s"; sha256sum m/*.gguf | cut -c1-16
for m in std idx16; do
  ./ds4-dump-logits -m m/$m.gguf --tokens-file tokens.txt --greedy 64 -o d/$m --threads 8 | tail -1
  echo "=== $m"
  timeout 200 python3 -m tools.reference.hf_crosscheck --model m/$m.gguf --ds4-dir d/$m --reference --json $OUT/$m.json
  echo "rc=$?  ($(( $(date +%s) - t0 )) s)"
done
