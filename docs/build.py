"""Build the offline HTML docs site (`make docs`): nbdev-processed notebooks -> Sphinx + myst-nb -> site/.

Steps: (1) nbdev's own notebook processor (`nbdev.serve.proc_nbs`, the step `nbdev_docs` runs before Quarto) writes
_proc/ with `show_doc` output for every exported symbol and hidden cells removed; (2) each processed notebook is
turned from Quarto conventions into myst-nb ones (front matter -> title, `#| echo: false` -> cell tags, nbdev links ->
local pages) and staged in build/docs_src/ in notebook order; (3) one API page per rl_notes module is written for
sphinx autodoc; (4) MathJax 3 is taken from its npm package (checked against a pinned hash) into a local static
folder; (5) sphinx-build writes site/. Nothing on the built pages loads from the network.
"""
import json, os, re, shutil, subprocess, sys, tarfile, time, hashlib, base64, configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT/'nbs'
SRC = ROOT/'build'/'docs'/'src'     # staged Sphinx source (build/ is git-ignored)
HTML = ROOT/'build'/'docs'/'html'   # sphinx output (myst-nb writes jupyter_execute/ beside it), copied to OUT
OUT = Path(os.environ.get('DOCS_OUT', ROOT/'site'))
CACHE = ROOT/'.cache'/'docs'
STRICT = os.environ.get('DOCS_STRICT', '1') == '1'   # 0: keep going past notebook/Sphinx warnings
MATHJAX_VERSION = '3.2.2'
MATHJAX_SHA512 = 'sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=='
MATHJAX_DIR = CACHE/'static'/'mathjax'   # served as _static/mathjax/

cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT/'settings.ini', encoding='utf-8')
CFG = cfg['DEFAULT']
DOC_URL = CFG['doc_host'].rstrip('/') + '/' + CFG.get('doc_baseurl', '').strip('/') + '/'

def log(*a): print('[docs]', *a, flush=True)

# ---------------------------------------------------------------- notebooks
def notebooks():
    "Notebooks in nbdev's order: index first, then by path; folders/files starting with _ or . skipped."
    nbs = [p for p in NBS.rglob('*.ipynb')
           if not any(part.startswith(('_', '.')) for part in p.relative_to(NBS).parts)]
    return sorted(nbs, key=lambda p: (p.name != 'index.ipynb', str(p.relative_to(NBS))))

MIXED = {}   # notebook -> cells mixing imports with other code (Quarto's nbdev_docs re-runs those cells)

def proc_notebooks(nbs):
    """Run nbdev's docs processing (show_doc for exported symbols, hidden cells removed, doc links) on each notebook
    into _proc/, in parallel; a notebook is redone when it or settings.ini is newer than its processed copy.
    Returns the _proc folder and {notebook: error} for notebooks nbdev could not process."""
    from concurrent.futures import ProcessPoolExecutor
    sys.path.insert(0, str(ROOT/'docs')); from nbproc import proc_one     # importable by the spawned workers
    import multiprocessing as mp
    proc = ROOT/'_proc'
    newest_cfg = (ROOT/'settings.ini').stat().st_mtime
    todo = []
    for p in nbs:
        d = proc/p.relative_to(NBS)
        if not d.exists() or d.stat().st_mtime < max(p.stat().st_mtime, newest_cfg):
            d.parent.mkdir(parents=True, exist_ok=True); todo.append((str(p), str(d)))
    errors = {}
    if todo:
        os.chdir(ROOT)
        n = max(1, min(len(todo), int(os.environ.get('DOCS_WORKERS', '2'))))
        with ProcessPoolExecutor(n, mp_context=mp.get_context('spawn')) as ex:
            for (src, _), (err, mixed) in zip(todo, ex.map(proc_one, todo)):
                if err: errors[Path(src)] = err
                if mixed: MIXED[Path(src)] = mixed
    return proc, errors

_re_opt = re.compile(r'^#\|\s*([\w-]+)\s*:\s*(.*?)\s*$')
_re_flag = re.compile(r'^#\|.*$')

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def committed_images(nb_path) -> int:
    "Images (PNG, SVG, JPEG outputs) in the committed notebook's cells that the page shows (`#| hide` cells are not shown)."
    n = 0
    for c in json.loads(Path(nb_path).read_text(encoding='utf-8'))['cells']:
        if c['cell_type'] != 'code' or re.search(r'^#\|\s*hide\s*$', _src(c), re.M): continue
        n += sum(any(k in o.get('data', {}) for k in ('image/png', 'image/svg+xml', 'image/jpeg')) for o in c.get('outputs', []))
    return n

def page_name(nb_path, front):
    "Page name as nbdev/Quarto names it: front matter output-file, else default_exp, else the name without 'NN_'."
    out = front.get('output-file')
    if out: return Path(out).stem
    return default_exp(nb_path) or re.sub(r'^\d+[a-z]?_', '', nb_path.stem)

def rewrite_links(md, pages):
    "nbdev writes links to the published site and to .ipynb files; point both at the local pages."
    md = md.replace(DOC_URL, '')
    def _nb(m):
        stem, frag = m.group(2), m.group(3) or ''
        return m.group(1) + pages.get(stem, stem) + '.html' + frag + ')'
    # [text](10_ppo.ipynb#x) -> [text](ppo.html#x)
    return re.sub(r'(\]\()(?!https?:)([\w./-]+?)\.ipynb(#[^)\s]*)?\)', _nb, md)

SHOWDOC_IDS = set()    # ids of the show_doc headings of the notebook being converted

def fix_showdoc_md(md, pages):
    "Quarto-flavoured show_doc markdown -> MyST: drop the leading rule and pandoc link attributes, keep the ids."
    md = re.sub(r'^\s*---[ \t]*\n', '', md)
    md = re.sub(r'\]\(([^)]+)\)\{[^}]*\}', r'](\1)', md)     # [source](url){target="_blank" ...}
    # headings keep the id nbdev links to (pandoc ids: lower case, spaces -> '-'); MyST would make `agg-loss`
    def _h(m):
        lvl, txt = len(m.group(1)), m.group(2).strip()
        ident = re.sub(r'\s+', '-', re.sub(r'[^\w\s.-]', '', txt.lower()))
        SHOWDOC_IDS.add(ident)
        return f'<h{lvl} id="{ident}" class="showdoc-name">{txt}</h{lvl}>'
    md = re.sub(r'^(#{2,6})[ \t]+(.+?)[ \t]*$', _h, md, flags=re.M)
    return rewrite_links(md, pages)

def _plain(txt):
    "Heading text without markdown formatting: links -> text, code/emphasis marks and math dollars dropped."
    txt = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', txt)
    return re.sub(r'[`*$]|(?<!\w)_|_(?!\w)', '', txt)

def pandoc_id(txt):
    "Heading id as Quarto/pandoc makes it: keep letters, digits, _ - . ; spaces -> '-'; lower case; from the first letter."
    t = re.sub(r'[^\w\s.-]', '', _plain(txt).lower(), flags=re.U)
    t = re.sub(r'\s+', '-', t.strip())
    return re.sub(r'^[^a-z\u00c0-\uffff]+', '', t)

def docutils_id(txt):
    import unicodedata
    t = unicodedata.normalize('NFKD', _plain(txt)).encode('ascii', 'ignore').decode().lower()
    t = re.sub(r'[^a-z0-9]+', '-', t).strip('-')
    return re.sub(r'^[^a-z]+', '', t)

def heading_aliases(md):
    "Quarto ids for headings whose Sphinx id differs (`agg_loss` -> Sphinx `agg-loss`), so authors' #links keep working."
    out, fence = [], False
    for line in md.split('\n'):
        if line.lstrip().startswith(('```', '~~~')): fence = not fence
        m = None if fence else re.match(r'^(#{1,6})\s+(.+?)\s*#*\s*$', line)
        if m:
            pid = pandoc_id(m.group(2))
            if pid and pid != docutils_id(m.group(2)): out += [f'<a id="{pid}"></a>', '']
        out.append(line)
    return '\n'.join(out)

def _readme_fill():
    "`fill(text, link)` of .ci/readme.py: the same markers README fills, filled the same way."
    import importlib.util
    spec = importlib.util.spec_from_file_location('rl_notes_readme', ROOT/'.ci'/'readme.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod.fill


def convert(proc_nb, pages, title_fallback):
    "Processed (Quarto-style) notebook -> myst-nb notebook."
    nb = json.loads(proc_nb.read_text(encoding='utf-8'))
    cells, front = [], {}
    for c in nb['cells']:
        src = _src(c)
        if c['cell_type'] == 'raw' and src.lstrip().startswith('---'):
            import yaml
            front = yaml.safe_load(src.strip().strip('-')) or {}
            head = f"# {front.get('title', title_fallback)}"
            if front.get('description'): head += f"\n\n> {front['description']}"
            cells.append({'cell_type': 'markdown', 'metadata': {}, 'source': head})
            continue
        if c['cell_type'] == 'raw': continue
        if c['cell_type'] == 'markdown':
            if src.strip().startswith('<!-- WARNING: THIS FILE WAS AUTOGENERATED'): continue
            c['source'] = heading_aliases(rewrite_links(src, pages))
            c.pop('attachments', None) if not c.get('attachments') else None
            cells.append(c); continue
        # code cell: Quarto cell options -> myst-nb tags
        lines = src.splitlines()
        opts, i = {}, 0
        while i < len(lines) and _re_flag.match(lines[i]):
            m = _re_opt.match(lines[i])
            if m: opts[m.group(1)] = m.group(2).lower()
            i += 1
        tags = set(c.get('metadata', {}).get('tags', []))
        flags = {w for l in lines[:i] for w in l[2:].replace(':', ' ').split()}
        if opts.get('include') == 'false' or flags & {'hide', 'default_exp'}: continue
        if opts.get('echo') == 'false': tags.add('remove-input')
        if opts.get('output') == 'false': tags.add('remove-output')
        c['source'] = '\n'.join(lines[i:]).strip('\n')
        if not c['source'] and not c.get('outputs'): continue
        if not c['source']: tags.add('remove-input')
        for o in c.get('outputs', []):
            d = o.get('data', {})
            if 'text/markdown' in d:
                d['text/markdown'] = fix_showdoc_md(_src({'source': d['text/markdown']}), pages)
        c['metadata'] = {'tags': sorted(tags)} if tags else {}
        cells.append(c)
    keys = {'code': ('id', 'cell_type', 'metadata', 'source', 'outputs', 'execution_count'),
            'markdown': ('id', 'cell_type', 'metadata', 'source', 'attachments')}
    nb['cells'] = [{k: c[k] for k in keys[c['cell_type']] if k in c} for c in cells]
    for i, c in enumerate(nb['cells']): c['id'] = f'c{i}'
    nb['nbformat'], nb['nbformat_minor'] = 4, 5
    nb['metadata'] = {'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'},
                      'language_info': {'name': 'python'}}
    return nb

def default_exp(nb_path):
    "Module name a notebook exports to (`#| default_exp name`), or None."
    nb = json.loads(nb_path.read_text(encoding='utf-8'))
    for c in nb['cells']:
        if c['cell_type'] == 'code':
            m = re.search(r'^#\|\s*default_exp\s+(\S+)', _src(c), re.M)
            if m: return m.group(1)
    return None

def export_targets(nb_path):
    """Modules a notebook writes code into: its `#| default_exp` first, then every `#| export <module>` (nbdev's
    export to another module, e.g. a loop exported from an algorithm notebook into `rl_notes.lab`), in cell order."""
    nb = json.loads(nb_path.read_text(encoding='utf-8'))
    first, out = default_exp(nb_path), []
    if first: out.append(first)
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        for m in re.finditer(r'^#\|\s*export[si]?[ \t]+([A-Za-z_][\w.]*)[ \t]*$', _src(c), re.M):
            if m.group(1) not in out: out.append(m.group(1))
    return out

# ---------------------------------------------------------------- API pages
def modules():
    lib = ROOT/CFG['lib_path']
    return sorted('.'.join(p.relative_to(ROOT).with_suffix('').parts) for p in lib.rglob('*.py')
                  if not any(part.startswith('_') for part in p.relative_to(lib).parts))

def exported(mod):
    "(name, autodoc directive) for each name in the module's `__all__`, read with ast (in `__all__` order)."
    import ast
    tree = ast.parse((ROOT/(mod.replace('.', '/') + '.py')).read_text(encoding='utf-8'))
    kinds, names = {}, []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)): kinds[node.name] = 'autofunction'
        elif isinstance(node, ast.ClassDef): kinds[node.name] = 'autoclass'
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    if t.id == '__all__': names = [ast.literal_eval(e) for e in node.value.elts]
                    else: kinds.setdefault(t.id, 'autodata')
    return [(n, kinds.get(n, 'autodata')) for n in names]

def _rst_text(t):
    "A title as the text of a reST hyperlink: backticks and angle brackets escaped (\"The `rl_notes` command\")."
    return re.sub(r'([\\`<>])', r'\\\1', t)

def api_pages(mod2page, titles):
    """One page per module: a link to each notebook that exports into it (its `default_exp` notebook first), then
    every name in `__all__` through autodoc, in `__all__` order. Returns the module short names and their notebooks."""
    (SRC/'api').mkdir(parents=True, exist_ok=True)
    names, sources = [], {}
    for mod in modules():
        short = mod.split('.', 1)[1] if '.' in mod else mod
        pages = mod2page.get(short, [])
        if not pages and STRICT: sys.exit(f'docs: no notebook exports into {mod} (a module without a source notebook)')
        sources[short] = pages
        lines = [mod, '=' * len(mod), '']
        if pages:
            links = ', '.join(f'`{_rst_text(titles.get(p, p))} <../{p}.html>`_' for p in pages)
            lines += [f"Source notebook{'s' if len(pages) > 1 else ''}: {links}", '']
        lines += [f'.. automodule:: {mod}', '']
        for name, kind in exported(mod):
            lines += [f'.. {kind}:: {mod}.{name}']
            if kind == 'autoclass': lines += ['   :members:', '   :undoc-members:', '   :show-inheritance:']
            lines += ['']
        write(SRC/'api'/f'{short}.rst', '\n'.join(lines))
        names.append(short)
    idx = ['API reference', '=============', '',
           'One page per module, generated by Sphinx autodoc from the exported code: signature, docstring, and the',
           'parameter comments (docments) as a parameter list. The notebooks show the same objects with their tests.', '',
           '.. toctree::', '   :maxdepth: 1', ''] + [f'   {n}' for n in names]
    write(SRC/'api'/'index.rst', '\n'.join(idx) + '\n')
    return names, sources

def modidx_links():
    "nbdev doc link ('core.html#agg_loss') -> (module short name, full symbol name), from the library's _modidx."
    try:
        ns = {}; exec((ROOT/CFG['lib_path']/'_modidx.py').read_text(encoding='utf-8'), ns)
    except Exception: return {}
    res = {}
    for mod, syms in ns['d'].get('syms', {}).items():
        for full, (url, _) in syms.items(): res[url] = (mod.split('.', 1)[1], full)
    return res

def fallback_api_links(pages_ids, staged):
    """nbdev links to methods (`ppo.html#valuemodel.forward`) that have no show_doc on the notebook page would be
    broken on the Quarto site too; point them at the symbol's entry on the API page instead."""
    links = modidx_links()
    def fix(m):
        page, frag = m.group(1), m.group(2)
        if frag in pages_ids.get(page, set()): return m.group(0)
        sym = links.get(f'{page}.html#{frag}')
        return f'](api/{sym[0]}.html#{sym[1]})' if sym else m.group(0)
    for name, txt in staged.items(): staged[name] = re.sub(r'\]\(([\w-]+)\.html#([^)\s"]+)\)', fix, txt)

# ---------------------------------------------------------------- MathJax (local, from the npm registry)
def _sri(path): return 'sha512-' + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()

def ensure_mathjax():
    if (MATHJAX_DIR/'tex-chtml.js').exists(): return
    CACHE.mkdir(parents=True, exist_ok=True)
    tgz = CACHE/f'mathjax-{MATHJAX_VERSION}.tgz'
    if not tgz.exists() or _sri(tgz) != MATHJAX_SHA512:
        if not shutil.which('npm'):
            sys.exit('docs: MathJax is fetched with `npm pack`; install npm (Debian: apt-get install -y npm) '
                     f'or put mathjax-{MATHJAX_VERSION}.tgz into {CACHE}')
        log(f'fetching mathjax@{MATHJAX_VERSION} from the npm registry')
        subprocess.run(['npm', 'pack', f'mathjax@{MATHJAX_VERSION}', '--silent'], cwd=CACHE, check=True,
                       stdout=subprocess.DEVNULL)
    if _sri(tgz) != MATHJAX_SHA512: sys.exit(f'docs: {tgz} does not match the pinned sha512')
    tmp = MATHJAX_DIR.with_name('mathjax.tmp'); shutil.rmtree(tmp, ignore_errors=True)
    keep = ('package/es5/tex-chtml.js', 'package/es5/output/chtml/fonts/woff-v2/', 'package/es5/input/tex/extensions/',
            'package/LICENSE')
    with tarfile.open(tgz) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.startswith(keep)]
        for m in members: m.name = m.name.replace('package/es5/', '', 1).replace('package/', '', 1)
        tf.extractall(tmp, members=members, filter='data')
    shutil.rmtree(MATHJAX_DIR, ignore_errors=True); tmp.rename(MATHJAX_DIR)

# ---------------------------------------------------------------- main
WRITTEN = set()
def write(path, text):
    "Write only when the text changed, so sphinx rebuilds only changed pages."
    path = Path(path); path.parent.mkdir(parents=True, exist_ok=True); WRITTEN.add(path)
    if not path.exists() or path.read_text(encoding='utf-8') != text: path.write_text(text, encoding='utf-8')

def stage():
    t0 = time.time()
    nbs = notebooks()        # listed before processing: helpers may be adding notebooks meanwhile
    proc, errors = proc_notebooks(nbs)
    log(f'nbdev processing: {time.time()-t0:.1f}s')
    if MIXED:
        log('note: cells that mix imports with other code ran only their imports here; Quarto\'s nbdev_docs re-runs '
            'them whole (nbdev FAQ: imports in a cell of their own): ' +
            ', '.join(f'{p.stem}{cells}' for p, cells in sorted(MIXED.items())))
    for p, err in errors.items():
        print(f'docs: nbdev could not process {p.relative_to(ROOT)}:\n{err}\n', file=sys.stderr)
    if errors:
        if STRICT: sys.exit(f'docs: {len(errors)} notebook(s) failed nbdev processing; DOCS_STRICT=0 renders them without show_doc')
        for p in errors:      # lenient mode: the notebook as committed, hidden/exported markers handled by convert()
            (proc/p.relative_to(NBS)).write_text(p.read_text(encoding='utf-8'), encoding='utf-8')
    SRC.mkdir(parents=True, exist_ok=True)
    before = {f for f in SRC.rglob('*') if f.is_file()}
    # first pass: page names from the processed front matter (output-file), for link rewriting
    fronts, pages = {}, {}
    for p in nbs:
        pp = proc/p.relative_to(NBS)
        if not pp.exists(): sys.exit(f'docs: nbdev did not process {p}')
        first = json.loads(pp.read_text(encoding='utf-8'))['cells'][:1]
        front = {}
        if first and first[0]['cell_type'] == 'raw' and _src(first[0]).lstrip().startswith('---'):
            import yaml; front = yaml.safe_load(_src(first[0]).strip().strip('-')) or {}
        fronts[p], pages[p.stem] = front, page_name(p, front)
    order, titles, mod2page, page_ids, staged, images = [], {}, {}, {}, {}, {}
    for p in nbs:
        name = pages[p.stem]
        images[name] = committed_images(p)
        SHOWDOC_IDS.clear()
        nb = convert(proc/p.relative_to(NBS), pages, p.stem)
        titles[name] = fronts[p].get('title', p.stem)
        for mod in export_targets(p): mod2page.setdefault(mod, []).append(name)
        if name != 'index': order.append(name)
        page_ids[name] = set(SHOWDOC_IDS)
        staged[name] = json.dumps(nb, ensure_ascii=False, indent=1)
    fallback_api_links(page_ids, staged)
    toc = '```{toctree}\n:hidden:\n:caption: Notebooks\n\n' + '\n'.join(order) + '\n```\n\n' \
          '```{toctree}\n:hidden:\n:caption: Reference\n\napi/index\n```\n'
    if 'index' in staged:
        nb = json.loads(staged['index'])
        fill = _readme_fill()   # the index's markers (headline verdicts, scope, layer picture, where a change goes), as README has them
        for c in nb['cells']:
            if c['cell_type'] == 'markdown' and '<!-- ' in _src(c):
                c['source'] = fill(_src(c), lambda stem: f"[{stem}]({pages.get(stem, stem)}.html)")
        nb['cells'].append({'id': 'toc', 'cell_type': 'markdown', 'metadata': {}, 'source': toc})
        staged['index'] = json.dumps(nb, ensure_ascii=False, indent=1)
    else:   # nbs/index.ipynb not written yet: a plain landing page
        lst = '\n'.join(f'- [{titles[n]}]({n}.html)' for n in order)
        write(SRC/'index.md', f"# {CFG['title']}\n\n> {CFG['description']}\n\n## Notebooks\n\n{lst}\n\n"
                              f"See also the [API reference](api/index.html).\n\n{toc}")
    for name, txt in staged.items(): write(SRC/f'{name}.ipynb', txt)
    api, sources = api_pages(mod2page, titles)
    write(SRC/'_order.json', json.dumps({'pages': ['index'] + order, 'api': api, 'api_sources': sources, 'images': images}, indent=1))
    for f in before - WRITTEN: f.unlink()          # pages of notebooks that no longer exist
    log(f'staged {len(order)+1} notebook pages and {len(api)} API pages in {SRC.relative_to(ROOT)}')

def main():
    t0 = time.time()
    stage()
    ensure_mathjax()
    t1 = time.time()
    env = dict(os.environ, RL_NOTES_DOCS_STATIC=str(MATHJAX_DIR.parent))
    cmd = [sys.executable, '-m', 'sphinx', '-b', 'html', '-c', str(ROOT/'docs'), '-j', 'auto', '-q',
           '-w', str(ROOT/'build'/'docs'/'warnings.log'), str(SRC), str(HTML)]
    if STRICT: cmd.insert(-2, '-W'); cmd.insert(-2, '--keep-going')
    log(' '.join(cmd[2:]))
    r = subprocess.run(cmd, env=env, cwd=ROOT)
    if r.returncode: sys.exit(f'docs: sphinx-build failed (exit {r.returncode}); warnings in build/docs/warnings.log')
    log(f'sphinx-build: {time.time()-t1:.1f}s')
    shutil.copy(SRC/'_order.json', HTML/'_order.json')
    shutil.rmtree(OUT, ignore_errors=True); shutil.copytree(HTML, OUT, ignore=shutil.ignore_patterns('.doctrees', '.buildinfo'))
    n = len(list(OUT.rglob('*.html')))
    log(f'site built in {time.time()-t0:.1f}s: {n} HTML files in {OUT}; open {OUT/"index.html"}')

if __name__ == '__main__': main()
