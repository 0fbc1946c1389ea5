#!/usr/bin/env bash
# On the GPU machine (the `run` tool; see the header of .ci/gpu_wheels.txt): unpack the carried wheels into
# .gpu_site/site-packages/ (first on PYTHONPATH, the working tree second: rl_notes is this checkout, installed with no
# dependency check), print the versions, run the GPU check, then every `#| gpu` notebook cell that runs alone
# (.ci/gpu_cells.py; the executed notebooks come back under $OUT). Results: $OUT/gpu_check.json, $OUT/gpu_check.log
# (+ test_gpu.xml), $OUT/gpu_cells.json and the notebooks.
# The unpacked tree's path must contain `site-packages`: dill pickles by value every module whose file path does not, and
# datasets' fingerprint then pickles pyarrow's module dict ("Can't pickle <class 'MonthDayNano'>").
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
PY=${PY:-python3}
if [ -f .whl/gpu_site.tar.xz ]; then
  t0=$(date +%s)
  rm -rf .gpu_site && mkdir -p .gpu_site/site-packages && tar -xJf .whl/gpu_site.tar.xz -C .gpu_site/site-packages
  echo "unpacked .whl/gpu_site.tar.xz in $(( $(date +%s) - t0 )) s"
else
  echo "no .whl/gpu_site.tar.xz (carry .whl): running with what the machine has"
fi
export PYTHONPATH=$PWD/.gpu_site/site-packages:$PWD${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
$PY - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import importlib, importlib.metadata as md, sys
print("python", sys.version.split()[0])
for n in ("torch", "numpy", "transformers", "tokenizers", "huggingface_hub", "safetensors", "accelerate", "datasets", "pyarrow", "pandas", "trl", "pytest", "fastcore"):
    try: print(f"{n:<16} {md.version(n):<12} {importlib.import_module(n).__file__}")
    except Exception as e: print(f"{n:<16} MISSING      {type(e).__name__}: {e}")
import torch; print("cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
import rl_notes.trainer; print("rl_notes", rl_notes.__version__, rl_notes.__file__)
PY
$PY .ci/gpu_check.py --out "$OUT" "$@"; rc=$?
$PY .ci/gpu_cells.py --out "$OUT" || rc=1
exit $rc
