#!/usr/bin/env python3
"""The bad-input corpus: every case is one planner command on a bad input, with
the exit code and the first error line it must give. Run by the `bad_input`
Meson test:

    python3 tests/badinput/run_corpus.py PLANNER SOURCE_ROOT [--only NAME] [--min-cases N] [FILE.cases ...]

With no files, every tests/badinput/*.cases is run. A case (docs/hardening.md):

    ## case NAME
    file NAME.yaml            # optional, repeatable: the lines up to `end` are the file
    ...
    end
    setup SHELL COMMAND       # optional, repeatable: run with bash in the case's directory
    run ARGS...               # the planner's arguments (shell words; {M} {C} {PLANS} {SRC} expand)
    exit 2
    first planner: error: PREFIX          # the first stderr line starting "planner: error:" starts so
    first~ REGEX                          # or: it matches REGEX (re.search)
    limit S                   # optional: this case's hang limit, above the 20 s (a large input's parse)

Every case runs in a fresh directory with a 20 s limit (PLANNER_CORPUS_LIMIT_S; a case's `limit` scaled by the same
factor). Besides its exit code and first line,
a case fails on a timeout, a signal, more than one error line, "internal error", or sanitizer output.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

# 20 s per case; PLANNER_CORPUS_LIMIT_S raises it for slow builds (the sanitizer job: make test-sanitize).
LIMIT_S = float(os.environ.get("PLANNER_CORPUS_LIMIT_S", "20"))


def parse(path):
    cases, cur, in_file = [], None, None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        raw = line.rstrip("\n")
        if in_file is not None:
            if raw == "end":
                in_file = None
            else:
                cur["files"][-1][1].append(raw)
            continue
        s = raw.strip()
        if not s or (s.startswith("#") and not s.startswith("## case")):
            continue
        if s.startswith("## case "):
            cur = {"name": s[8:].strip(), "where": f"{os.path.basename(path)}:{n}", "files": [], "setup": [], "run": None,
                   "exit": None, "first": None, "regex": False, "limit": 0.0}
            cases.append(cur)
            continue
        if cur is None:
            sys.exit(f"{path}:{n}: text before the first '## case'")
        key, _, rest = s.partition(" ")
        if key == "file":
            cur["files"].append((rest.strip(), []))
            in_file = True
        elif key == "setup":
            cur["setup"].append(rest)
        elif key == "run":
            cur["run"] = rest
        elif key == "exit":
            cur["exit"] = int(rest)
        elif key == "limit":
            cur["limit"] = float(rest)
        elif key in ("first", "first~"):
            cur["first"], cur["regex"] = rest.strip(), key == "first~"
        else:
            sys.exit(f"{path}:{n}: unknown key '{key}' (file, end, setup, run, exit, first, first~, limit)")
    for c in cases:
        if c["run"] is None or c["exit"] is None or (c["exit"] != 0 and c["first"] is None):
            sys.exit(f"{c['where']}: case {c['name']} needs run, exit and (unless exit 0) first")
    return cases


def run_case(planner, src, c):
    with tempfile.TemporaryDirectory(prefix="badinput-") as d:
        for name, lines in c["files"]:
            os.makedirs(os.path.dirname(os.path.join(d, name)) or d, exist_ok=True)
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))
        subst = {"{M}": f"{src}/configs/models", "{C}": f"{src}/configs/clusters", "{PLANS}": f"{src}/tests/codegen/plans",
                 "{SRC}": src, "{PLANNER}": planner}

        def expand(t):
            for k, v in subst.items():
                t = t.replace(k, v)
            return t
        for cmd in c["setup"]:
            r = subprocess.run(["bash", "-c", expand(cmd)], cwd=d, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                return f"setup failed: {cmd}: {r.stderr.strip()[:200]}"
        argv = [planner] + [expand(w) for w in shlex.split(c["run"])]
        limit_s = max(LIMIT_S, c["limit"] * LIMIT_S / 20)
        try:
            r = subprocess.run(argv, cwd=d, stdin=subprocess.DEVNULL, capture_output=True, timeout=limit_s)
        except subprocess.TimeoutExpired:
            return f"no answer in {limit_s} s (a hang)"
        err = r.stderr.decode("utf-8", "replace")
        errors = [l for l in err.splitlines() if l.startswith("planner: error:")]
        problems = []
        if r.returncode < 0:
            problems.append(f"killed by signal {-r.returncode}")
        if r.returncode != c["exit"]:
            problems.append(f"exit {r.returncode}, want {c['exit']}")
        if "internal error" in err:
            problems.append("'internal error'")
        if re.search(r"AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|LeakSanitizer", err):
            problems.append("sanitizer report")
        if len(errors) > 1:
            problems.append(f"{len(errors)} error lines")
        if c["first"] is not None:
            got = errors[0] if errors else "(no 'planner: error:' line)"
            ok = re.search(c["first"], got) if c["regex"] else got.startswith(c["first"])
            if not ok:
                problems.append(f"first line {got!r}, want {'~' if c['regex'] else ''}{c['first']!r}")
        return "; ".join(problems) + (f"\n    stderr: {err.strip()[:400]}" if problems else "")


def main():
    args = sys.argv[1:]
    only, min_cases = None, 0
    if "--only" in args:
        i = args.index("--only"); only = args[i + 1]; del args[i:i + 2]
    if "--min-cases" in args:
        i = args.index("--min-cases"); min_cases = int(args[i + 1]); del args[i:i + 2]
    planner, src, files = os.path.abspath(args[0]), os.path.abspath(args[1]), args[2:]
    files = files or sorted(glob.glob(os.path.join(src, "tests/badinput/*.cases")))
    cases = [c for f in files for c in parse(f)]
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"duplicate case names: {sorted(dup)}")
    if only:
        cases = [c for c in cases if re.search(only, c["name"])]
    failed, start = 0, time.time()
    for c in cases:
        why = run_case(planner, src, c)
        if why:
            failed += 1
            print(f"FAIL {c['name']} ({c['where']}): {why}")
    passed = len(cases) - failed
    print(f"bad-input corpus: {len(cases)} cases from {len(files)} files, {passed} handled, {failed} not, {time.time() - start:.0f} s")
    if len(cases) < min_cases:
        print(f"fewer than {min_cases} cases")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
