#!/usr/bin/env bash
# Fails if nbdev_export or nbdev_clean would change any file under nbs/ or rl_notes/ (notebooks are the source), if
# README.md is not what nbs/index.ipynb makes, or if the wheel `pip wheel .` builds has another version than settings.ini.
set -euo pipefail
snap() { find nbs rl_notes -type f \( -name '*.ipynb' -o -name '*.py' \) -not -path '*/.ipynb_checkpoints/*' -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum; }
before=$(snap)
nbdev_clean
nbdev_export
after=$(snap)
if [ "$before" != "$after" ]; then
  echo "nbdev_export / nbdev_clean changed these files; run 'make export' and commit:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
python3 .ci/readme.py --check
python3 .ci/wheel_metadata.py --check-version     # the built wheel carries settings.ini's version
echo "sync-check: notebooks, library, README and the wheel's version are in sync"
