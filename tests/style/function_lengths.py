#!/usr/bin/env python3
"""Function length check (issue "Foundation": no function over about 80 lines in runtime/,
dp_solver/ and codegen/).

usage: function_lengths.py MAX_LINES FILE_OR_DIR...
Prints every function body longer than MAX_LINES (lines from the line of its opening brace to
the line of its closing brace) as `LINES FILE:LINE NAME`, the longest first, and exits 1 if
there is one. A body is a brace block whose head ends in a parameter list (optionally const /
noexcept / override / a trailing return type) and is not a control statement or a lambda,
found outside any other function; lambdas and blocks inside a function count as its lines.
Comments, string and character literals are blanked first so braces inside them do not count.
With --report, prints the longest function of each file and exits 0.
"""
import pathlib
import re
import sys

HEAD_IS_CALLABLE = re.compile(r'\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(final)?\s*(->\s*[\w:<>,\s\*&]+)?\s*$')
CONTROL = re.compile(r'\b(if|for|while|switch|catch)\s*\(')
LAMBDA = re.compile(r'\]\s*(\([^)]*\))?\s*(mutable)?\s*(->[^{]*)?$')
NAME = re.compile(r'([\w:~]+)\s*\((?:[^()]|\([^()]*\))*\)[^(){}]*$')


def blank(src):
    src = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), src, flags=re.S)
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'R"\((.*?)\)"', lambda m: '""' + '\n' * m.group(0).count('\n'), src, flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])+'", "''", src)


def functions(path):
    src = blank(pathlib.Path(path).read_text(errors='replace'))
    out, stack, line, head_start = [], [], 1, 0
    for i, c in enumerate(src):
        if c == '\n':
            line += 1
        elif c == '{':
            head = ' '.join(src[head_start:i].split())
            inside = any(kind == 'func' for kind, _, _ in stack)
            callable_head = HEAD_IS_CALLABLE.search(head) and not CONTROL.search(head) and not LAMBDA.search(head)
            name = NAME.search(head)
            stack.append(('func' if callable_head and not inside else 'block', line, name.group(1) if name else head[-40:]))
            head_start = i + 1
        elif c == '}':
            if stack:
                kind, start, name = stack.pop()
                if kind == 'func':
                    out.append((line - start + 1, start, name))
            head_start = i + 1
        elif c == ';':
            head_start = i + 1
    return out


def sources(args):
    for a in args:
        p = pathlib.Path(a)
        if p.is_dir():
            yield from sorted(q for q in p.rglob('*') if q.suffix in ('.cc', '.cu', '.h'))
        elif p.exists():
            yield p
        else:
            sys.exit(f'function_lengths.py: {a}: no such file or directory')


def main():
    args = sys.argv[1:]
    report = '--report' in args
    args = [a for a in args if a != '--report']
    if len(args) < 2 or not args[0].isdigit():
        sys.exit(__doc__)
    limit = int(args[0])
    rows = [(n, str(f), start, name) for f in sources(args[1:]) for n, start, name in functions(f)]
    if report:
        best = {}
        for n, f, start, name in rows:
            if n > best.get(f, (0,))[0]:
                best[f] = (n, start, name)
        for f, (n, start, name) in sorted(best.items(), key=lambda kv: -kv[1][0]):
            print(f'{n:5d}  {f}:{start}  {name}')
        return 0
    long_ones = sorted((r for r in rows if r[0] > limit), reverse=True)
    for n, f, start, name in long_ones:
        print(f'{n:5d}  {f}:{start}  {name}  (over {limit} lines)')
    print(f'{len(rows)} functions read, {len(long_ones)} over {limit} lines')
    return 1 if long_ones else 0


if __name__ == '__main__':
    sys.exit(main())
