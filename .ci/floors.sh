#!/usr/bin/env bash
# `make test-floors`: the declared floor of every runtime requirement that has one (settings.ini `requirements`,
# `name>=X` -> `name==X`: torch, transformers, accelerate), the other requirements unpinned, and the package itself
# (`--no-deps`, a non-editable install of the wheel) in a fresh venv; then .ci/floors_smoke.py (load, generate, two
# train steps) from outside the repository. FLOORS_VENV (default build/floors-venv) is recreated on every run;
# FLOORS_OVERRIDE="transformers==5.23.0" tries another version of a requirement (to check that a floor is the floor).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${FLOORS_VENV:-build/floors-venv}
t0=$SECONDS
mapfile -t reqs < <($PYTHON - <<'EOF'
import configparser, os, re, shlex
cfg = configparser.ConfigParser(delimiters=['=']); cfg.read('settings.ini', encoding='utf-8')
name = lambda r: re.match(r'[A-Za-z0-9_.-]+', r).group(0).lower()
override = {name(r): r for r in shlex.split(os.environ.get('FLOORS_OVERRIDE', ''))}   # e.g. "transformers==5.23.0"
for r in shlex.split(cfg['DEFAULT']['requirements']):
    m = re.match(r'^([A-Za-z0-9_.\[\]-]+)\s*>=\s*([^,;\s]+)', r)
    print(override.get(name(r), f'{m.group(1)}=={m.group(2)}' if m else r))
EOF
)
echo "test-floors: ${reqs[*]}"
rm -rf "$VENV"
$PYTHON -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q --no-compile "${reqs[@]}"
"$VENV/bin/python" -m pip install -q --no-compile --no-deps .
"$VENV/bin/python" -m pip check
echo "test-floors: venv ready in $((SECONDS - t0))s"
here=$PWD
(cd "${TMPDIR:-/tmp}" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 "$here/$VENV/bin/python" "$here/.ci/floors_smoke.py")
echo "test-floors: passed in $((SECONDS - t0))s"
