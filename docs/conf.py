# Sphinx configuration for the offline docs site; run through `make docs` (docs/build.py stages the sources).
import configparser, os, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_cfg = configparser.ConfigParser(delimiters=['=']); _cfg.read(ROOT/'settings.ini', encoding='utf-8')
_cfg = _cfg['DEFAULT']

project = _cfg['title']
author = _cfg['author']
copyright = _cfg['copyright'].replace('%(author)s', _cfg['author'])
release = version = _cfg['version']

extensions = ['myst_nb', 'sphinx.ext.autodoc', 'sphinx.ext.mathjax', 'sphinx.ext.viewcode']
exclude_patterns = ['_order.json', '**.ipynb_checkpoints']
root_doc = 'index'
language = 'en'

# notebooks: show the committed outputs, never execute
nb_execution_mode = 'off'
nb_render_markdown_format = 'myst'      # show_doc output is markdown
nb_ipywidgets_js = {}                   # no widget JS from a CDN
myst_enable_extensions = ['dollarmath', 'amsmath', 'colon_fence', 'html_image', 'attrs_inline']
myst_dmath_double_inline = True
myst_all_links_external = True          # docs/build.py already points nbdev's links at the local pages
myst_heading_anchors = 3
suppress_warnings = ['myst.header', 'mystnb.unknown_mime_type', 'misc.highlighting_failure']

# autodoc: exported symbols (`__all__`), in source order, with the docments comments as parameter fields
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_preserve_defaults = False   # True trips over some nbdev signatures (Sphinx 9)
autodoc_default_options = {'exclude-members': '__init__, __new__'}

def _math(s): return re.sub(r'(?<![\\$])\$([^$\n]+?)\$', r':math:`\1`', s)

def _bars(s):
    "Escape `|` outside literals and math: in reST `|x|` is a substitution reference (`|log r|` in a docstring means abs)."
    parts = re.split(r'(``[^`]+``|:math:`[^`]+`)', s)
    return ''.join(p if i % 2 else p.replace('|', '\\|') for i, p in enumerate(parts))

def _md_inline(s):
    "docstrings and comments are written in markdown: `code` -> ``code``, $x$ -> :math:`x`, a bare | escaped."
    return _bars(_math(re.sub(r'(?<!`)`([^`\n]+)`(?!`)', r'``\1``', s)))

def _docments(app, what, name, obj, options, lines):
    if what in ('data', 'attribute') and getattr(obj, '__doc__', None) == getattr(type(obj), '__doc__', None):
        lines.clear(); return                     # a dict/tuple constant: not the builtin type's docstring
    for i, l in enumerate(lines): lines[i] = _md_inline(l)
    if what not in ('function', 'method', 'class'): return
    try:
        from fastcore.docments import docments
        target = obj.__init__ if what == 'class' and '__init__' in vars(obj) else obj
        d = docments(target, full=True)
    except Exception: return
    fields = []
    for k, v in d.items():
        if k in ('self', 'cls') or not v.get('docment'): continue
        doc = _md_inline(v['docment'])
        fields.append(f':returns: {doc}' if k == 'return' else f':param {k}: {doc}')
    if fields:
        if lines and lines[-1].strip(): lines.append('')
        lines.extend(fields)

def setup(app):
    app.connect('autodoc-process-docstring', _docments)

# HTML: furo (no external fonts or scripts), MathJax 3 from the local npm copy
html_theme = 'furo'
html_title = f"{project} {version}"
html_static_path = ['_static', os.environ.get('RL_NOTES_DOCS_STATIC', str(ROOT/'.cache'/'docs'/'static'))]
html_css_files = ['rl_notes.css']
html_favicon = '_static/favicon.svg'
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {'navigation_with_keys': True}
mathjax_path = 'mathjax/tex-chtml.js'
mathjax3_config = {'tex': {'packages': {'[-]': ['noundefined']}},     # an undefined macro is a TeX error (the test fails)
                   'options': {'ignoreHtmlClass': 'tex2jax_ignore|mathjax_ignore|document',
                               'processHtmlClass': 'tex2jax_process|mathjax_process|math|output_area'}}
