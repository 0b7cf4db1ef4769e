#!/usr/bin/env python3
"""module_graph.py on the real tree (must pass) and on small trees made here with one forbidden edge
each (must fail, naming the file, line and edge): an include, a meson link, a system header, and a
design.md without its table (exit 2).

usage: module_graph_test.py SOURCE_ROOT
"""
import pathlib
import subprocess
import sys
import tempfile

TABLE = '''# Design
## Module dependencies
| module | may include | never |
|---|---|---|
| common | - | cuda |
| spec | common | - |
| dp_solver | common, spec | mpi |
| runtime | common, spec | - |
'''


def run(script, root):
    p = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def tree(tmp, files, design=TABLE):
    root = pathlib.Path(tmp)
    (root / 'docs').mkdir(parents=True, exist_ok=True)
    (root / 'docs' / 'design.md').write_text(design)
    for d in ('common', 'spec', 'dp_solver', 'runtime'):
        (root / d).mkdir(exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def main():
    source = pathlib.Path(sys.argv[1])
    script = source / 'tests' / 'style' / 'module_graph.py'
    failures = []

    def expect(name, root, rc_want, needle):
        rc, out = run(script, root)
        if rc != rc_want or needle not in out:
            failures.append(f'{name}: exit {rc} (want {rc_want}), output lacks {needle!r}:\n{out}')

    expect('real tree', source, 0, 'every include and link allowed')
    with tempfile.TemporaryDirectory() as tmp:
        ok = {'spec/a.h': '#include "common/x.h"\n', 'runtime/r.cc': '#include "spec/a.h"\n#include "runtime/r.h"\n'}
        expect('allowed edges', tree(tmp, ok), 0, '4 modules')
    with tempfile.TemporaryDirectory() as tmp:
        files = {'runtime/executor.cc': '#include <vector>\n\n#include "dp_solver/evaluate.h"\n'}
        expect('include', tree(tmp, files), 1, 'runtime/executor.cc:3: module runtime includes dp_solver/evaluate.h (dp_solver)')
    with tempfile.TemporaryDirectory() as tmp:
        files = {'common/half.h': '#pragma once\n#include "spec/layer.h"\n'}
        expect('common includes spec', tree(tmp, files), 1, 'common/half.h:2: module common includes spec/layer.h')
    with tempfile.TemporaryDirectory() as tmp:
        files = {'runtime/meson.build': "runtime_dep = declare_dependency(\n  dependencies: [spec_dep, dp_solver_dep])\n"}
        expect('meson link', tree(tmp, files), 1, 'runtime/meson.build:2: module runtime links dp_solver_dep (dp_solver)')
    with tempfile.TemporaryDirectory() as tmp:
        files = {'dp_solver/c.cc': '#include <mpi.h>\n'}
        expect('system header', tree(tmp, files), 1, 'dp_solver/c.cc:1: module dp_solver includes <mpi.h>')
    with tempfile.TemporaryDirectory() as tmp:
        files = {'common/g.h': '#include <cuda_runtime.h>\n'}
        expect('cuda header', tree(tmp, files), 1, 'module common includes <cuda_runtime.h>')
    with tempfile.TemporaryDirectory() as tmp:
        expect('no table', tree(tmp, {}, design='# Design\nno table\n'), 2, 'no "## Module dependencies" table')
    with tempfile.TemporaryDirectory() as tmp:
        root = tree(tmp, {})
        (root / 'codegen').mkdir()
        expect('module without a row', root, 2, 'module codegen has no row')
    for f in failures:
        print(f)
    print(f'module_graph_test: {8 - len(failures)} of 8 cases as expected')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
