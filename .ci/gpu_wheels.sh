#!/usr/bin/env bash
# Downloads the wheels of .ci/gpu_wheels.txt for the GPU machine (Python 3.12, manylinux x86_64; no dependencies resolved:
# the list is complete), unpacks them into one tree and packs it as .whl/gpu_site.tar.xz (what the `run` tool carries),
# then prints each wheel's size, the bundle's size and the total that travels (bundle + tracked files; limit 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
DL=build/gpu_wheels; SITE=build/gpu_site
rm -rf "$SITE"; mkdir -p "$DL" "$SITE" .whl
specs=$(sed -e 's/#.*//' .ci/gpu_wheels.txt | awk 'NF {print $1}')
for s in $specs; do
  n=$(echo "${s%%==*}" | tr 'A-Z_-' 'a-z..' ); v=${s##*==}
  ls "$DL" | tr 'A-Z_-' 'a-z..' | grep -q "^${n}.${v}." && continue
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_28_x86_64 -d "$DL" "$s"
done
$PY - "$DL" "$SITE" $specs <<'PY'
import sys, zipfile, shutil, os, re
from pathlib import Path
dl, site, specs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
norm = lambda s: re.sub(r"[-_.]+", ".", s).lower()
total = 0
for s in specs:
    name, ver = s.split("==")
    w = [p for p in dl.glob("*.whl") if norm(p.name.split("-")[0]) == norm(name) and p.name.split("-")[1] == ver]
    assert len(w) == 1, (s, w)
    w = w[0]; total += w.stat().st_size
    with zipfile.ZipFile(w) as z: z.extractall(site)
    for data in site.glob("*.data"):                       # purelib/platlib parts of a wheel go to the top of the tree
        for sub in ("purelib", "platlib"):
            if (data / sub).is_dir():
                for p in (data / sub).iterdir(): shutil.move(str(p), site / p.name)
        shutil.rmtree(data)
    print(f"{s:<30} {w.stat().st_size / 2**20:6.2f} MiB  {w.name}")
print(f"{'wheels':<30} {total / 2**20:6.2f} MiB  ({len(specs)} wheels)")
PY
rm -f .whl/gpu_site.tar.xz
tar -C "$SITE" -cf - . | xz -9 -T2 > .whl/gpu_site.tar.xz
bundle=$(stat -c %s .whl/gpu_site.tar.xz)
tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s}')
$PY -c "b, t = $bundle, $tracked; print(f'bundle .whl/gpu_site.tar.xz {b / 2**20:.2f} MiB; tracked files {t / 2**20:.2f} MiB; travels {(b + t) / 2**20:.2f} MiB of 64'); assert b + t < 62 * 2**20, 'over the 64 MiB the run tool carries (62 MiB kept as margin)'"
