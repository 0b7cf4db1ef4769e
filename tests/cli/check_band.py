#!/usr/bin/env python3
"""Checks a solve's --json output against its engine file's band (docs/cost_model.md section 2, "Bands").

  check_band.py PLAN.json ENGINE.yaml PRECISION [NAME]

A plan whose basis ends in " MoE" (a model with routed experts) is checked against the file's band_moe.
With NAME, the band of predicted.engines.NAME (solve --engine all: that engine's line) against ENGINE.yaml, the
engine NAME's file, and no lead. The band is the engine file's for the precision; every derived range equals the closed form (tokens/s and MFU
divided by 1 + error, the iteration multiplied by it); the lead's costs with every overlap off are no faster
than with them; the runners-up counted within the band are those whose iteration is at most t (1 + high) / (1 + low).
Exit 1 naming the first figure that differs.
"""
import json
import re
import sys


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def main():
    plan = json.load(open(sys.argv[1]))
    text = open(sys.argv[2]).read()
    precision = sys.argv[3]
    p = plan["predicted"]
    if len(sys.argv) > 4:
        p = p["engines"][sys.argv[4]]
    if "band" not in p:
        sys.exit(f"check_band: {sys.argv[1]} has no band" + (f" for engine {sys.argv[4]}" if len(sys.argv) > 4 else ""))
    moe = p["band"]["basis"].endswith(" MoE")  # a model with routed experts on an engine with band_moe
    key = "\nband_moe:" if moe else "\nband:"
    block = text.split(key, 1)[1].split("\nband_moe:")[0] if key in text else ""
    m = re.search(r"^  %s: \{low: (-?[0-9.]+), high: (-?[0-9.]+), runs: ([0-9]+)(?:, checks: ([0-9]+))?\}" % precision,
                  block, re.M)
    if not m:
        sys.exit(f"check_band: {sys.argv[2]} has no band for {precision}")
    low, high, runs, nchecks = float(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4) or 0)
    p = plan["predicted"]
    engine = plan["inputs"]["engine"]
    if len(sys.argv) > 4:  # one engine of --engine all: its own figures and band
        engine = sys.argv[4]
        p = p["engines"][engine]
    b = p["band"]
    checks = [
        ("basis", b["basis"] == f"{engine} {precision}" + (" MoE" if moe else "")),
        ("runs", b["runs"] == runs),
        ("checks", b.get("checks", 0) == nchecks),
        ("error_low", close(b["error_low"], low)),
        ("error_high", close(b["error_high"], high)),
        ("iteration_seconds_low", close(b["iteration_seconds_low"], p["iteration_seconds"] * (1 + low))),
        ("iteration_seconds_high", close(b["iteration_seconds_high"], p["iteration_seconds"] * (1 + high))),
        ("tokens_per_second_per_gpu_low", close(b["tokens_per_second_per_gpu_low"], p["tokens_per_second_per_gpu"] / (1 + high))),
        ("tokens_per_second_per_gpu_high", close(b["tokens_per_second_per_gpu_high"], p["tokens_per_second_per_gpu"] / (1 + low))),
        ("mfu_low", close(b["mfu_low"], p["mfu"] / (1 + high))),
        ("mfu_high", close(b["mfu_high"], p["mfu"] / (1 + low))),
    ]
    lead = p.get("lead")
    if plan.get("runners_up") and len(sys.argv) <= 4:
        t = p["iteration_seconds"]
        ru = plan["runners_up"][0]["iteration_seconds"]
        within = sum(1 for r in plan["runners_up"] if r["iteration_seconds"] * (1 + low) <= t * (1 + high))
        share = ((ru - t) - (lead["runner_up_no_overlap_seconds"] - lead["chosen_no_overlap_seconds"])) / (ru - t) if ru > t else 0
        checks += [
            ("lead.runner_up_iteration_seconds", close(lead["runner_up_iteration_seconds"], ru)),
            ("lead.chosen_no_overlap_seconds >= iteration_seconds", lead["chosen_no_overlap_seconds"] >= t * (1 - 1e-9)),
            ("lead.runner_up_no_overlap_seconds >= runner-up's", lead["runner_up_no_overlap_seconds"] >= ru * (1 - 1e-9)),
            ("lead.runners_up_within_band", lead["runners_up_within_band"] == within),
            ("lead.overlap_share", abs(lead["overlap_share"] - share) <= 1e-5 * max(1.0, abs(share))),
        ]
    for name, ok in checks:
        if not ok:
            sys.exit(f"check_band: predicted.band/lead {name} differs: band {b}, lead {lead}, file {low} {high} {runs}")
    print(f"check_band: {engine} {precision}: {len(checks)} figures agree")


if __name__ == "__main__":
    main()
