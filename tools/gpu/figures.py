#!/usr/bin/env python3
"""The device check's figures (tools/gpu/check.sh), from its logs; every line starts "FIGURE".

    figures.py block PROFILE_LOG TORCH_LINES   our Llama block (profile's F + B + W medians, ms) against
                                               PyTorch eager's forward + backward per (b, tp); the 1.3x verdict
    figures.py iteration REPORT_MD LABEL       a run report's measured and predicted iteration time
Tested on CPU logs by tests/gpu/figures_test.sh.
"""
import re
import sys

UNITS = {'s': 1.0, 'ms': 1e-3, 'us': 1e-6, 'µs': 1e-6, 'min': 60.0}


def seconds(text):
    m = re.match(r'\s*([0-9.]+)\s*([a-zµ]+)', text)
    return float(m.group(1)) * UNITS[m.group(2)] if m and m.group(2) in UNITS else None


def block(profile_log, torch_lines):
    ours = {}
    for line in open(profile_log, encoding='utf-8'):
        f = line.split()
        if len(f) == 8 and f[0] == 'transformer_block' and f[1].isdigit() and f[2].isdigit():
            ours[(int(f[1]), int(f[2]))] = float(f[3]) + float(f[4]) + float(f[5])
    n = 0
    for line in open(torch_lines, encoding='utf-8'):
        m = re.search(r'torch block (\w+) b=(\d+) tp=(\d+) .*total_ms=([0-9.]+)', line)
        if not m:
            continue
        dtype, key, torch_ms = m.group(1), (int(m.group(2)), int(m.group(3))), float(m.group(4))
        n += 1
        if key not in ours:
            print(f"FIGURE llama block {dtype} b={key[0]} tp={key[1]}: torch eager {torch_ms:.3f} ms, ours not measured")
            continue
        r = ours[key] / torch_ms
        print(f"FIGURE llama block {dtype} b={key[0]} tp={key[1]}: ours {ours[key]:.3f} ms, torch eager {torch_ms:.3f} ms, "
              f"ours/torch {r:.2f} ({'within' if r <= 1.3 else 'NOT within'} 1.3x)")
    if n == 0:
        print("FIGURE llama block: no PyTorch timings found")
    return 0


def iteration(report, label):
    for line in open(report, encoding='utf-8'):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if cells and cells[0] == 'iteration' and len(cells) >= 3:
            meas, pred = seconds(cells[1]), seconds(cells[2])
            if meas and pred:
                print(f"FIGURE {label}: measured iteration {cells[1]}, predicted {cells[2]}, predicted/measured {pred / meas:.3f} "
                      f"({abs(pred / meas - 1) * 100:.1f}% off; the issue asks within 10%)")
                return 0
            print(f"FIGURE {label}: iteration row not parsed: {line.strip()}")
            return 1
    print(f"FIGURE {label}: no iteration row in {report}")
    return 1


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'block':
        sys.exit(block(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == 'iteration':
        sys.exit(iteration(sys.argv[2], sys.argv[3]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
