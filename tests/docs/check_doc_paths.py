#!/usr/bin/env python3
"""Every repository path that README.md, HACKING.md and docs/*.md name exists.

    python3 tests/docs/check_doc_paths.py SOURCE_ROOT [FILE.md ...]

Without FILE arguments it checks README.md, HACKING.md and every docs/*.md of
SOURCE_ROOT. Exit 0 when every named path exists, 1 (listing FILE:LINE: PATH
for each missing one) otherwise, 2 on bad usage or when no path was found at
all (a check that checks nothing must not pass).

The extraction rule, applied to the whole text (prose, code spans and code
blocks alike):

1. A candidate is a maximal run of characters from [A-Za-z0-9_.*-] and '/'
   that contains at least one '/', and is not preceded by a letter, digit,
   '_', '.', '/', '~', '$' or '-' (so nothing inside a longer path, an
   absolute path, a URL, ../shared/..., $SRC/... or a flag value like
   --x=a/b is taken).
2. Trailing '.' characters are dropped (end of a sentence); a trailing '/'
   names a directory.
3. It is a repository path only if its first segment is an entry of
   SOURCE_ROOT itself (a top-level directory or file such as spec/, docs/,
   tests/, configs/, .ci/), other than .git and the outputs users create:
   entries named build*, launch* (build/, build-fuzz/, launch/). So
   plan.yaml, launch/runs/<id>/, build/planner/planner, L/run.sh,
   shared/docs/... and ../shared/... are never checked.
4. Skipped as placeholders: a candidate followed directly by '<', '{' or '$'
   (planner/cmd_<name>.cc, runs/<id>), and one with a segment made only of
   dots (tests/..., ../x).
5. A candidate with '*' is a glob and must match at least one path;
   any other must exist as a file or directory (with a trailing '/': a
   directory).
"""
import glob
import os
import re
import sys

CANDIDATE = re.compile(r"(?<![A-Za-z0-9_./~$-])([A-Za-z0-9_.*-]*/[A-Za-z0-9_.*/-]*)")
PLACEHOLDER_NEXT = set("<{$")


def top_level_entries(root):
    out = set()
    for name in os.listdir(root):
        if name == ".git" or name.startswith("build") or name.startswith("launch"):
            continue
        out.add(name)
    return out


def candidates(text, top):
    """Yields (line number, path) for each repository path named in text."""
    for m in CANDIDATE.finditer(text):
        path = m.group(1)
        end = m.end(1)
        if end < len(text) and text[end] in PLACEHOLDER_NEXT:
            continue
        path = path.rstrip(".")
        segments = [s for s in path.split("/") if s != ""]
        if not segments or segments[0] not in top:
            continue
        if any(set(s) == {"."} for s in segments):
            continue
        yield text.count("\n", 0, m.start(1)) + 1, path


def exists(root, path):
    full = os.path.join(root, path)
    if "*" in path:
        return len(glob.glob(full)) > 0
    if path.endswith("/"):
        return os.path.isdir(full)
    return os.path.exists(full)


def main(argv):
    if len(argv) < 2 or not os.path.isdir(argv[1]):
        print("usage: check_doc_paths.py SOURCE_ROOT [FILE.md ...]", file=sys.stderr)
        return 2
    root = argv[1]
    files = argv[2:]
    if not files:
        files = [os.path.join(root, "README.md"), os.path.join(root, "HACKING.md")]
        files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    top = top_level_entries(root)
    checked = 0
    missing = []
    for f in files:
        if not os.path.isfile(f):
            missing.append(f"{f}: the document itself is missing")
            continue
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        for line, path in candidates(text, top):
            checked += 1
            if not exists(root, path):
                missing.append(f"{os.path.relpath(f, root)}:{line}: {path}")
    for m in missing:
        print(f"missing: {m}")
    print(f"doc paths: {checked} named in {len(files)} documents, {len(missing)} missing")
    if checked == 0:
        print("no repository path found at all: the extraction rule is broken", file=sys.stderr)
        return 2
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
