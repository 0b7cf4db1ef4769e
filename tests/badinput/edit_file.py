#!/usr/bin/env python3
"""Edits a file for a bad-input case (tests/badinput/*.cases `setup` lines):

    python3 edit_file.py FILE REGEX REPLACEMENT [COUNT]

replaces the first COUNT (default 1) matches of REGEX (Python re, MULTILINE) with REPLACEMENT
(\\n and \\1 as in re.sub). Exits 1 when REGEX does not match, so that a case whose file has
changed shape fails its setup instead of testing an unedited file.
"""
import re
import sys

path, pattern, repl = sys.argv[1], sys.argv[2], sys.argv[3]
count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
text = open(path, encoding="utf-8").read()
new, n = re.subn(pattern, repl, text, count=count, flags=re.M)
if n == 0:
    sys.exit(f"edit_file.py: {pattern!r} does not match {path}")
open(path, "w", encoding="utf-8").write(new)
