from configparser import ConfigParser
import setuptools, shlex

# note: all settings are in settings.ini; edit there, not here
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language git_url".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o:cfg[o] for o in cfg_keys}
setup_cfg['keywords'] = cfg['keywords'].split()

# settings.ini `license` (nbdev's short names) -> SPDX expression (PEP 639: no License :: classifier beside it)
licenses = {'apache2': 'Apache-2.0', 'mit': 'MIT', 'gpl3': 'GPL-3.0-only', 'bsd3': 'BSD-3-Clause'}
# settings.ini `status = N` -> "Development Status :: N - ..." (PyPI's trove classifiers, numbered from 1)
statuses = {1: 'Planning', 2: 'Pre-Alpha', 3: 'Alpha', 4: 'Beta', 5: 'Production/Stable', 6: 'Mature', 7: 'Inactive'}
status = int(cfg['status'])
assert status in statuses, f"settings.ini status must be 1-7, got {status}"
# Python versions claimed: only those CI tests (settings.ini `python_versions`, default: min_python alone)
py_versions = cfg.get('python_versions', cfg['min_python']).split()
assert py_versions[0] == cfg['min_python'], "settings.ini: python_versions must start at min_python"

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
# settings.ini `extras_NAME = ...` -> the extra NAME (`pip install "rl_notes[NAME]"`)
extras = {k[len('extras_'):]: shlex.split(v) for k, v in cfg.items() if k.startswith('extras_')}
doc_url = cfg.get('doc_host', '').rstrip('/') + '/' + cfg.get('doc_baseurl', '').strip('/')

setuptools.setup(
    name = cfg['lib_name'],
    license_expression = licenses.get(cfg['license'].lower(), cfg['license']),
    classifiers = [
        f'Development Status :: {status} - {statuses[status]}',
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: '+o for o in py_versions],
    url = cfg['git_url'],
    project_urls = {'Source': cfg['git_url'], **({'Documentation': doc_url} if cfg.get('doc_host') else {})},
    packages = setuptools.find_packages(exclude=['tests', 'tests.*']),
    package_dir = {'': '.'},  # flat layout: the editable install is a .pth of the repo root (setuptools' finder warns)
    include_package_data = True,
    install_requires = requirements,
    extras_require={ 'dev': dev_requirements, **extras },
    python_requires  = '>=' + cfg['min_python'],
    long_description = open('README.md', encoding='utf-8').read(),
    long_description_content_type = 'text/markdown',
    zip_safe = False,
    entry_points = {
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']
    },
    **setup_cfg)
