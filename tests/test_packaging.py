"The wheel carries settings.ini's metadata; the version check of .ci/sync_check.sh fails on a mismatch; every imported package is declared."
import ast, importlib.util, shlex, shutil, subprocess, sys, zipfile
from pathlib import Path
import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('wheel_metadata', ROOT/'.ci'/'wheel_metadata.py')
wm = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(wm)
CFG = wm.settings()

@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    return wm.build_wheel(tmp_path_factory.mktemp('wheel'))    # (path, METADATA, pip output)

@pytest.mark.wheel
def test_identity(wheel):
    whl, meta, _ = wheel
    assert meta['Name'] == CFG['lib_name'] and meta['Version'] == CFG['version']
    assert whl.name == f"{CFG['lib_name']}-{CFG['version']}-py3-none-any.whl"
    assert meta['Summary'] == CFG['description']
    assert meta['Author'] == CFG['author'] and meta['Author-email'] == CFG['author_email']
    assert meta['Keywords'].split(',') == CFG['keywords'].split()
    assert meta['Home-page'] == CFG['git_url']
    assert meta['Requires-Python'] == '>=' + CFG['min_python']
    assert meta['Description-Content-Type'] == 'text/markdown' and 'rl_notes' in meta.get_payload()
    with zipfile.ZipFile(whl) as z: tops = {n.split('/')[0] for n in z.namelist()}
    assert tops == {'rl_notes', f"rl_notes-{CFG['version']}.dist-info"}, tops      # the package only (no tests, docs, build/)
    assert 'rl_notes/_modidx.py' in z.namelist() and 'rl_notes/cli.py' in z.namelist()

@pytest.mark.wheel
def test_license_and_classifiers(wheel):
    _, meta, out = wheel
    assert meta['License-Expression'] == 'Apache-2.0' and meta['License'] is None   # PEP 639, not the legacy field
    cls = meta.get_all('Classifier')
    assert not [c for c in cls if c.startswith('License ::')], cls                   # superseded by License-Expression
    assert CFG['status'] == '3' and 'Development Status :: 3 - Alpha' in cls          # was "4 - Beta" (off by one)
    assert [c for c in cls if c.startswith('Development Status')] == ['Development Status :: 3 - Alpha']
    py = [c.rsplit(' :: ', 1)[1] for c in cls if c.startswith('Programming Language :: Python ::')]
    assert py == CFG['python_versions'].split() and py[0] == CFG['min_python']
    assert 'deprecat' not in out.lower(), out                                         # setuptools' license warnings

@pytest.mark.wheel
def test_requirements(wheel):
    _, meta, _ = wheel
    reqs = [Requirement(r) for r in meta.get_all('Requires-Dist')]
    run = {r.name: str(r.specifier) for r in reqs if r.marker is None}
    dev = {r.name for r in reqs if r.marker is not None and r.marker.evaluate({'extra': 'dev'})}
    want = {Requirement(r).name: str(Requirement(r).specifier) for r in shlex.split(CFG['requirements'])}
    assert run == want
    assert 'fastcore' not in run and 'fastcore' in dev and 'numpy' in run and 'pyflakes' in dev
    for name in ('torch', 'transformers', 'accelerate'): assert run[name].startswith('>='), (name, run[name])
    extra = lambda e: {r.name for r in reqs if r.marker is not None and r.marker.evaluate({'extra': e})}
    assert extra('math') == {'math-verify'} and extra('lora') == {'peft'}, (extra('math'), extra('lora'))
    assert extra('tensorboard') == {'tensorboard'} and extra('trackio') == {'trackio'}
    assert {'math-verify', 'peft', 'tensorboard', 'trackio'} <= dev          # the tests exercise every extra

def _imports():
    "Top-level package of every import in rl_notes/*.py (function-level ones too), with the line."
    for f in sorted((ROOT/'rl_notes').glob('*.py')):
        for node in ast.walk(ast.parse(f.read_text(encoding='utf-8'))):
            if isinstance(node, ast.Import): names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level: names = [node.module]
            else: continue
            for n in names: yield n.split('.')[0], f'{f.name}:{node.lineno}'

OPTIONAL = {'trl': 'rl_notes.trl_trainer only (a subclass of TRL\'s trainer: importing that module needs TRL, the extra "trl"); a dev requirement',
            'gymnasium': 'rl_notes.control.train_ppo_gym only (imported in the function); a dev requirement',
            'math_verify': 'the math task (extra `math`)', 'peft': 'LoRA (extra `lora`)',
            'tensorboard': 'report_to="tensorboard" (extra `tensorboard`)', 'trackio': 'report_to="trackio" (extra `trackio`)',
            'wandb': 'report_to="wandb" (extra `wandb`)'}

def test_imports_declared():
    from importlib.metadata import packages_distributions
    dists = packages_distributions()
    run = {Requirement(r).name.lower() for r in shlex.split(CFG['requirements'])}
    dev = {Requirement(r).name.lower() for r in shlex.split(CFG['dev_requirements'])}
    for mod, where in _imports():
        if mod in sys.stdlib_module_names or mod in ('rl_notes', '__future__'): continue
        names = {d.lower() for d in dists.get(mod, [mod])}
        if mod in OPTIONAL: assert names & dev, f'{where}: optional {mod} is not a dev requirement'
        else: assert names & run, f'{where}: imports {mod} ({names}), which settings.ini requirements do not declare'

def _copy_repo(dst):
    for p in ('setup.py', 'settings.ini', 'README.md', '.ci/wheel_metadata.py'):
        (dst/p).parent.mkdir(parents=True, exist_ok=True); shutil.copy(ROOT/p, dst/p)
    shutil.copytree(ROOT/'rl_notes', dst/'rl_notes', ignore=shutil.ignore_patterns('__pycache__'))

def _check(root):
    return subprocess.run([sys.executable, str(root/'.ci'/'wheel_metadata.py'), '--check-version'],
                          capture_output=True, text=True, cwd=root)

@pytest.mark.wheel
def test_version_check_fails_on_mismatch(tmp_path):
    "The sync check's version step: passes on the repo, fails when setup.py drops the version or settings.ini moves on."
    _copy_repo(tmp_path)
    assert _check(tmp_path).returncode == 0
    setup = (tmp_path/'setup.py').read_text()
    (tmp_path/'setup.py').write_text(setup.replace("setup_cfg = {o:cfg[o] for o in cfg_keys}",
                                                   "setup_cfg = {o:cfg[o] for o in cfg_keys if o != 'version'}"))
    r = _check(tmp_path)
    assert r.returncode == 1 and 'has version 0.0.0' in r.stderr, r.stderr          # the bug this fixes: rl_notes-0.0.0
    (tmp_path/'setup.py').write_text(setup)
    ini = (tmp_path/'settings.ini').read_text()
    (tmp_path/'settings.ini').write_text(ini.replace(f"version = {CFG['version']}\n", "version = 9.9.9\n"))
    r = _check(tmp_path)
    assert r.returncode == 1 and '__version__' in r.stderr and 'version = 9.9.9' in r.stderr, r.stderr
