#!/usr/bin/env python3
"""The module graph of docs/design.md, enforced.

usage: module_graph.py SOURCE_ROOT

Reads the table under the heading "## Module dependencies" in SOURCE_ROOT/docs/design.md: one row
per module, `| module | may include |`, the second column a comma-separated list of modules (or
`-` for none, `*` for any). Then, for every .h / .cc / .cu file of each module (a module is a
folder; `runtime` means the files directly in runtime/, not runtime/kernels/ or runtime/comm/),
every `#include "X/..."` names the module of X (runtime/kernels and runtime/comm by their two
parts, `planner_config.h` the generated config header, counted as `planner_config`); and each
module's meson.build names the modules it links by their `<name>_dep` (any use but the one it
declares) (kernels_dep is
runtime/kernels, comm_dep runtime/comm). An edge the table does not allow fails, as does a
system header the table's third column forbids (`| module | may include | never |`, e.g.
`cuda, mpi, nccl`: `<cuda...>`, `<cublas...>`, `<cudnn...>`, `<mpi.h>`, `<nccl.h>`).

Prints each violation as `FILE:LINE: module A includes B (docs/design.md allows: ...)` and exits 1;
exit 0 when every edge is allowed; exit 2 when the table is missing or names no module (a check
that checks nothing must not pass), or a module folder of the tree has no row.
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include\s+"([^"]+)"', re.M)
SYSTEM = re.compile(r'^[ \t]*#[ \t]*include\s+<([^>]+)>', re.M)
DEP_MODULE = {'common_dep': 'common', 'spec_dep': 'spec', 'dp_solver_dep': 'dp_solver', 'codegen_dep': 'codegen',
              'kernels_dep': 'runtime/kernels', 'comm_dep': 'runtime/comm', 'runtime_dep': 'runtime',
              'profiler_dep': 'profiler'}
SYSTEM_FAMILIES = {'cuda': ('cuda', 'cublas', 'cudnn', 'curand', 'cusparse', 'nvtx'), 'mpi': ('mpi.h',), 'nccl': ('nccl.h',)}


def read_table(design):
    text = design.read_text()
    m = re.search(r'^## Module dependencies\s*$(.*?)(?=^## |\Z)', text, re.M | re.S)
    if not m:
        return None
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip().strip('`') for c in line.strip().strip('|').split('|')]
        if len(cells) < 2 or not line.strip().startswith('|') or set(cells[0]) <= set('-: ') or cells[0] == 'module':
            continue
        allowed = '*' if cells[1] == '*' else set() if cells[1] in ('-', '') else {c.strip().strip('`') for c in cells[1].split(',')}
        never = set() if len(cells) < 3 or cells[2] in ('-', '') else {c.strip() for c in cells[2].split(',')}
        rows[cells[0]] = (allowed, never)
    return rows


def module_files(root, module):
    folder = root / module
    if module == 'runtime':
        return sorted(p for p in folder.iterdir() if p.suffix in ('.h', '.cc', '.cu'))
    return sorted(p for p in folder.rglob('*') if p.suffix in ('.h', '.cc', '.cu'))


def target_module(path, modules):
    parts = path.split('/')
    if len(parts) == 1:
        return parts[0].rsplit('.', 1)[0]  # planner_config.h
    two = '/'.join(parts[:2])
    return two if two in modules else parts[0]


def allowed_edge(module, target, rows):
    allowed = rows[module][0]
    return target == module or allowed == '*' or target in allowed


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    rows = read_table(root / 'docs' / 'design.md')
    if not rows:
        print('module_graph: docs/design.md has no "## Module dependencies" table with a module row', file=sys.stderr)
        return 2
    bad = []
    for module in sorted(rows):
        if not (root / module).is_dir():
            print(f'module_graph: docs/design.md names module {module}, which is not a folder', file=sys.stderr)
            return 2
        for f in module_files(root, module):
            src = f.read_text(errors='replace')
            rel = f.relative_to(root)
            for m in INCLUDE.finditer(src):
                target = target_module(m.group(1), rows)
                if not allowed_edge(module, target, rows):
                    line = src.count('\n', 0, m.start()) + 1
                    bad.append(f'{rel}:{line}: module {module} includes {m.group(1)} ({target}); docs/design.md allows: '
                               f'{", ".join(sorted(rows[module][0])) or "none"}')
            for m in SYSTEM.finditer(src):
                for family in rows[module][1]:
                    if m.group(1).startswith(SYSTEM_FAMILIES.get(family, (family,))):
                        line = src.count('\n', 0, m.start()) + 1
                        bad.append(f'{rel}:{line}: module {module} includes <{m.group(1)}>; docs/design.md: never {family}')
        build = root / module / 'meson.build'
        if build.exists():
            text = build.read_text()
            for m in re.finditer(r'\b(\w+_dep)\b(?!\s*=[^=])', text):
                dep = m.group(1)
                target = DEP_MODULE.get(dep)
                if target and not allowed_edge(module, target, rows):
                    line = text.count('\n', 0, m.start()) + 1
                    bad.append(f'{build.relative_to(root)}:{line}: module {module} links {dep} ({target}); docs/design.md allows: '
                               f'{", ".join(sorted(rows[module][0])) or "none"}')
    for folder in ('common', 'spec', 'dp_solver', 'codegen', 'runtime', 'runtime/kernels', 'runtime/comm', 'profiler', 'planner'):
        if (root / folder).is_dir() and folder not in rows:
            print(f'module_graph: module {folder} has no row in docs/design.md\'s "## Module dependencies" table', file=sys.stderr)
            return 2
    for b in bad:
        print(b)
    if not bad:
        print(f'module_graph: {len(rows)} modules, every include and link allowed by docs/design.md')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
