#!/usr/bin/env python3
"""Build the wheel (`pip wheel . --no-deps`, in an isolated build environment as a user's `pip install` does) and
read its METADATA. `python .ci/wheel_metadata.py --check-version` (run by .ci/sync_check.sh) exits 1 when the wheel's
version, or `rl_notes.__version__`, differs from settings.ini's `version`; without arguments it prints METADATA's
header. tests/test_packaging.py checks the rest of the metadata with the same `build_wheel`."""
import configparser, email.parser, pathlib, re, subprocess, sys, tempfile, zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

def settings():
    "settings.ini's [DEFAULT] section."
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT/'settings.ini', encoding='utf-8')
    return cfg['DEFAULT']

def build_wheel(out_dir):
    "Build the wheel into `out_dir`; return (path of the wheel, parsed METADATA, pip's output)."
    r = subprocess.run([sys.executable, '-m', 'pip', 'wheel', str(ROOT), '--no-deps', '-w', str(out_dir)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode: sys.exit(f'pip wheel failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}')
    wheels = sorted(pathlib.Path(out_dir).glob('*.whl'))
    if len(wheels) != 1: sys.exit(f'expected one wheel in {out_dir}, found {[w.name for w in wheels]}')
    with zipfile.ZipFile(wheels[0]) as z:
        name = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))
        meta = email.parser.Parser().parsestr(z.read(name).decode('utf-8'))
    return wheels[0], meta, r.stdout + r.stderr

def init_version():
    "`__version__` written into rl_notes/__init__.py by nbdev (put_version_in_init)."
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', (ROOT/'rl_notes'/'__init__.py').read_text(encoding='utf-8'), re.M)
    return m.group(1) if m else None

def main():
    with tempfile.TemporaryDirectory(prefix='rl_notes-wheel-') as tmp:
        whl, meta, _ = build_wheel(tmp)
        if '--check-version' not in sys.argv:
            print(whl.name); print('\n'.join(f'{k}: {v}' for k, v in meta.items())); return
        want, bad = settings()['version'], []
        if meta['Version'] != want: bad.append(f"the wheel {whl.name} has version {meta['Version']}")
        if init_version() != want: bad.append(f"rl_notes/__init__.py has __version__ = {init_version()!r}")
        if bad: sys.exit(f"version mismatch with settings.ini's version = {want}: " + '; '.join(bad))
        print(f'wheel-check: {whl.name} carries settings.ini version {want}')

if __name__ == '__main__': main()
