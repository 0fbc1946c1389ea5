"""Browser test of the built docs site (`make docs-test`): headless Debian chromium loads every page from localhost.

Fails on: a broken internal link (missing page or missing #anchor), a missing image, a console error, a failed or
non-local network request, unrendered math (raw `$...$`, or a math element MathJax did not typeset, or a TeX error),
a notebook missing from the site or out of order, an exported symbol missing from its API page, an API page without a
link to its source notebook, a search that finds nothing. Saves screenshots to site/_artifacts/. Installs chromium,
its driver, a CJK font and selenium if missing.
"""
import ast, json, os, re, shutil, subprocess, sys, tempfile, threading, time
from functools import partial
from http.server import ThreadingHTTPServer, SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlparse, unquote

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get('DOCS_OUT', ROOT/'site'))
ART = SITE/'_artifacts'
CHROMIUM, DRIVER = '/usr/bin/chromium', '/usr/bin/chromedriver'
SKIP_DIRS = ('_static', '_sources', '_artifacts', '_images')
SEARCH_TERMS = ['agg_loss', 'masked_mean']

def log(*a): print('[docs-test]', *a, flush=True)

# ---------------------------------------------------------------- what the test needs
def ensure_tools():
    pkgs = []
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()): pkgs += ['chromium', 'chromium-driver']
    fc = subprocess.run(['fc-list', ':lang=zh'], capture_output=True, text=True) if shutil.which('fc-list') else None
    if not (fc and fc.stdout.strip()): pkgs += ['fonts-wqy-microhei']     # CJK glyphs for the 中文摘要 cells
    if pkgs:
        if os.geteuid() != 0: sys.exit(f'docs-test: needs Debian packages {pkgs}; run as root or apt-get install them')
        log('installing', *pkgs)
        env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        if subprocess.run(['apt-get', 'install', '-y', '-q', *pkgs], env=env, stdout=subprocess.DEVNULL).returncode:
            subprocess.run(['apt-get', 'update', '-q'], env=env, check=True, stdout=subprocess.DEVNULL)
            subprocess.run(['apt-get', 'install', '-y', '-q', *pkgs], env=env, check=True, stdout=subprocess.DEVNULL)
    import importlib.util
    if importlib.util.find_spec('selenium') is None:
        subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '-r', str(ROOT/'docs'/'requirements.txt')], check=True)

# ---------------------------------------------------------------- local server
class Handler(SimpleHTTPRequestHandler):
    errors = []
    def log_message(self, *a): pass
    def log_request(self, code='-', size='-'):
        if str(code).isdigit() and int(code) >= 400: Handler.errors.append((int(code), self.path))

def serve():
    srv = ThreadingHTTPServer(('127.0.0.1', 0), partial(Handler, directory=str(SITE)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_address[1]}/'

def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for f in ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
              '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage',
              '--window-size=1280,1000', f'--user-data-dir={tempfile.mkdtemp(prefix="docs-chromium-")}']:
        o.add_argument(f)
    o.set_capability('goog:loggingPrefs', {'browser': 'ALL', 'performance': 'ALL'})
    d = webdriver.Chrome(options=o, service=Service(DRIVER))
    d.set_page_load_timeout(90); d.set_script_timeout(90)
    return d

# ---------------------------------------------------------------- in-page checks
PAGE_JS = r"""
const done = arguments[arguments.length - 1];
// On a loaded machine MathJax may not have started when this runs: wait (bounded) for the page to finish loading,
// for MathJax's start-up promise, then for every math element to be typeset; the checks below report what is left.
const waitFor = (cond, ms) => new Promise(res => { const t0 = Date.now();
  const tick = () => (cond() || Date.now() - t0 > ms) ? res() : setTimeout(tick, 50); tick(); });
const hasMath = () => document.querySelector('.math') !== null;
const mjReady = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
const settle = waitFor(() => document.readyState === 'complete' && (!hasMath() || mjReady()), 30000)
  .then(() => mjReady() ? MathJax.startup.promise : null)
  .then(() => waitFor(() => [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-container')), 20000));
settle.then(() => {
  const skip = new Set(['SCRIPT', 'STYLE', 'PRE', 'CODE', 'TEXTAREA', 'MJX-CONTAINER', 'KBD', 'SAMP']);
  const raw = [];
  const walk = (n) => {
    if (n.nodeType === 1) {
      if (skip.has(n.tagName) || n.classList.contains('highlight')) return;
      for (const c of n.childNodes) walk(c);
    } else if (n.nodeType === 3) {
      const t = n.textContent;
      const m = t.match(/\$\$|\$[^$\s][^$]*?\$|\\\(|\\\[|\\(frac|sum|mathbb|mathrm|text)\{/);
      if (m) raw.push(t.slice(Math.max(0, m.index - 30), m.index + 50).trim());
    }
  };
  walk(document.body);
  const maths = [...document.querySelectorAll('.math')];
  done({
    title: document.title,
    raw_math: raw,
    math: maths.length,
    untypeset: maths.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60)),
    tex_errors: [...document.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent),
    images: document.images.length,
    bad_images: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    cjk: [...document.querySelectorAll('p, li, td')].filter(e => /[\u4e00-\u9fff]/.test(e.textContent)).length,
    // a font with CJK glyphs is in use: two different characters draw different pixels (missing glyphs draw the
    // same empty box)
    cjk_glyphs: (() => {
      const c = document.createElement('canvas'); c.width = c.height = 64; const g = c.getContext('2d');
      const draw = ch => { g.clearRect(0, 0, 64, 64); g.font = '40px ' + getComputedStyle(document.body).fontFamily;
                           g.fillText(ch, 4, 48); return g.getImageData(0, 0, 64, 64).data.join(','); };
      return draw('\u4e2d') !== draw('\u6587');
    })(),
    sidebar: [...document.querySelectorAll('.sidebar-tree a.reference')].map(a => a.getAttribute('href')),
  });
});
"""

SEARCH_JS = r"""
const done = arguments[arguments.length - 1];
const t0 = Date.now();
(function poll() {
  const items = document.querySelectorAll('#search-results ul.search li, #search-results li');
  const status = (document.querySelector('#search-results .search-summary, #search-results p') || {}).textContent || '';
  if (items.length || /did not match|found/i.test(status) || Date.now() - t0 > 20000)
    done({n: items.length, status: status, hrefs: [...document.querySelectorAll('#search-results li a')].map(a => a.href)});
  else setTimeout(poll, 200);
})();
"""

_ids_cache = {}
def ids_of(path):
    if path not in _ids_cache:
        html = path.read_text(encoding='utf-8', errors='replace')
        _ids_cache[path] = set(unquote(m) for m in re.findall(r'\s(?:id|name)="([^"]+)"', html))
    return _ids_cache[path]

def local_file(url, base):
    p = unquote(urlparse(url).path)
    f = SITE/p.lstrip('/')
    return f/'index.html' if p.endswith('/') else f

def exported(mod_file):
    "Names in a module's `__all__` (read with ast: no import needed)."
    for node in ast.parse(mod_file.read_text(encoding='utf-8')).body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '__all__' for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    return []

def main():
    if not (SITE/'index.html').exists(): sys.exit(f'docs-test: no site at {SITE}; run `make docs` first')
    ensure_tools()
    t0 = time.time()
    srv, base = serve()
    drv = browser()
    pages = sorted(p for p in SITE.rglob('*.html') if not p.relative_to(SITE).parts[0] in SKIP_DIRS)
    problems, checked, stats = [], 0, dict(links=0, external=0, images=0, math=0)
    def bad(page, msg): problems.append(f'{page}: {msg}')
    sidebar_order = None
    try:
        drv.get('about:blank'); time.sleep(1)      # warm-up: browser start-up traffic is not a page's
        drv.get_log('performance'); drv.get_log('browser')
        for p in pages:
            rel = p.relative_to(SITE).as_posix()
            drv.get_log('performance'); drv.get_log('browser')          # drop entries of the previous page
            drv.get(base + rel)
            r = drv.execute_async_script(PAGE_JS)
            checked += 1
            stats['math'] += r['math']; stats['images'] += r['images']
            if rel == 'index.html': sidebar_order = r['sidebar']
            for s in r['raw_math']: bad(rel, f'unrendered math: {s!r}')
            for s in r['untypeset']: bad(rel, f'math element not typeset: {s!r}')
            for s in r['tex_errors']: bad(rel, f'TeX error: {s!r}')
            for s in r['bad_images']: bad(rel, f'missing image: {s}')
            if r['cjk'] and not r['cjk_glyphs']: bad(rel, 'Chinese text drawn without a CJK font (empty boxes)')
            stats['cjk_pages'] = stats.get('cjk_pages', 0) + bool(r['cjk'])
            for e in drv.get_log('browser'):
                if e['level'] == 'SEVERE': bad(rel, f"console error: {e['message'][:300]}")
            urls = {}
            for e in drv.get_log('performance'):
                m = json.loads(e['message'])['message']
                if m['method'] == 'Network.requestWillBeSent':
                    urls[m['params']['requestId']] = m['params']['request']['url']
                    u = urlparse(m['params']['request']['url'])
                    if u.scheme in ('http', 'https', 'ws', 'wss') and u.hostname not in ('127.0.0.1', 'localhost'):
                        bad(rel, f"network request leaves localhost: {m['params']['request']['url'][:200]}")
                elif m['method'] == 'Network.responseReceived' and m['params']['response']['status'] >= 400:
                    bad(rel, f"HTTP {m['params']['response']['status']}: {m['params']['response']['url']}")
                elif m['method'] == 'Network.loadingFailed' and not m['params'].get('canceled'):
                    bad(rel, f"request failed: {m['params'].get('errorText')} "
                                 f"{urls.get(m['params'].get('requestId'), '(url unknown)')}")
            for href in set(r['links']):
                u = urlparse(href)
                if u.scheme not in ('http', 'https'): continue
                if u.hostname not in ('127.0.0.1', 'localhost'): stats['external'] += 1; continue
                stats['links'] += 1
                f = local_file(href, base)
                if not f.is_file(): bad(rel, f'broken link: {href.replace(base, "/")}'); continue
                if u.fragment and f.suffix == '.html' and unquote(u.fragment) not in ids_of(f):
                    bad(rel, f'broken anchor: {href.replace(base, "/")}')

        # notebooks: every one a page, in notebook order in the sidebar
        order = json.loads((SITE/'_order.json').read_text())
        for name in order['pages']:
            if not (SITE/f'{name}.html').is_file(): bad('site', f'notebook page missing: {name}.html')
        nb_side = [h.split('#')[0].removesuffix('.html') for h in (sidebar_order or []) if not h.startswith('api/')]
        nb_side = [h for h in nb_side if h in order['pages']]
        if nb_side != order['pages'][1:]: bad('index.html', f'sidebar order {nb_side} != notebook order {order["pages"][1:]}')
        # figures: each notebook page shows as many images as its committed notebook holds
        for name, n_nb in order.get('images', {}).items():
            f = SITE/f'{name}.html'
            if not f.is_file(): continue
            n_page = len(re.findall(r'<img [^>]*src="[^"]*_images/', f.read_text(encoding='utf-8', errors='replace')))
            stats['figure_pages'] = stats.get('figure_pages', 0) + bool(n_nb)
            if n_page != n_nb: bad(f'{name}.html', f'shows {n_page} images, its notebook holds {n_nb}')
        # API: every exported symbol documented on its module page
        lib = ROOT/'rl_notes'; n_sym = 0
        for short in order['api']:
            f = SITE/'api'/f'{short}.html'
            if not f.is_file(): bad('api', f'missing API page api/{short}.html'); continue
            ids = ids_of(f)
            html = f.read_text(encoding='utf-8', errors='replace')
            srcs = order.get('api_sources', {}).get(short)
            if srcs is not None and not srcs: bad(f'api/{short}.html', 'no source notebook exports into this module')
            m = re.search(r'Source notebooks?:(.*?)</p>', html, re.S)
            hrefs = set(re.findall(r'<a [^>]*href="\.\./([\w.-]+)\.html"', m.group(1))) if m else set()
            for page in srcs or []:     # each module's page links the notebook(s) it is exported from, in its text
                if page not in hrefs: bad(f'api/{short}.html', f'no link to its source notebook {page}.html')
            for name in exported(lib/(short.replace('.', '/') + '.py')):
                n_sym += 1
                if f'rl_notes.{short}.{name}' not in ids: bad(f'api/{short}.html', f'exported symbol {name} not documented')
        stats['api_symbols'] = n_sym
        # screenshots
        ART.mkdir(exist_ok=True)
        drv.set_window_size(1280, 1400)
        drv.get(base + 'index.html'); time.sleep(0.3); drv.save_screenshot(str(ART/'index.png'))
        nb_pages = order['pages'][1:]
        pick = next((n for n in nb_pages if '<img' in (SITE/f'{n}.html').read_text(encoding='utf-8')
                     and 'class="math' in (SITE/f'{n}.html').read_text(encoding='utf-8')), nb_pages[0] if nb_pages else 'index')
        drv.get(base + f'{pick}.html'); drv.execute_async_script(PAGE_JS); drv.save_screenshot(str(ART/f'{pick}.png'))
        img = drv.find_elements('css selector', 'div.cell_output img')
        if img:
            drv.execute_script('arguments[0].scrollIntoView({block: "center", behavior: "instant"})', img[0]); time.sleep(0.3)
            drv.save_screenshot(str(ART/f'{pick}-plot.png'))
        # search
        for term in SEARCH_TERMS:
            drv.get(base + f'search.html?q={term}')
            s = drv.execute_async_script(SEARCH_JS)
            if not s['n']: bad('search.html', f'search for {term!r} found nothing ({s["status"]!r})')
            else: log(f'search {term!r}: {s["n"]} results')
            checked += 1
        shots = sorted(os.path.relpath(p, ROOT) for p in ART.glob('*.png'))
    finally:
        drv.quit(); srv.shutdown()
    for code, path in Handler.errors: problems.append(f'server: HTTP {code} for {path}')
    problems = sorted(set(problems))
    log(f"{checked} pages loaded in {time.time()-t0:.1f}s; {stats['links']} internal links, {stats['external']} "
        f"external (not fetched), {stats['images']} images, {stats['math']} math elements, "
        f"{stats.get('figure_pages', 0)} notebook pages with figures (image counts match their notebooks), "
        f"{stats.get('api_symbols', 0)} exported symbols on API pages, {stats.get('cjk_pages', 0)} pages with Chinese text")
    log('screenshots:', *shots)
    for p in problems: print('FAIL', p)
    print(f'docs-test: {checked - len({p.split(":")[0] for p in problems})} passed, '
          f'{len({p.split(":")[0] for p in problems})} failed')
    sys.exit(1 if problems else 0)

if __name__ == '__main__': main()
