#!/usr/bin/env python3
"""Checks a solve's --json predicted.communication (docs/cost_model.md section 3, "Hidden and exposed").

  check_comm.py PLAN.json [TP_EXPOSED_SHARE]

Every kind's exposed seconds are within its total (all of one device's: the one exposing the most); data_parallel's
exposed is at most predicted.dp_allreduce_seconds (the slowest device's exposure);
with TP_EXPOSED_SHARE (--tp-comm-overlap on: 1 - hidden + hidden x slowdown) tensor_parallel's exposed is that
share of its total. Exit 1 naming the first figure that differs.
"""
import json
import sys


def main():
    plan = json.load(open(sys.argv[1]))
    p = plan["predicted"]
    comm = p.get("communication")
    if not comm:
        sys.exit("check_comm: no predicted.communication")
    for kind, c in comm.items():
        if not (0 <= c["exposed_seconds"] <= c["total_seconds"] * (1 + 1e-9)):
            sys.exit(f"check_comm: {kind}: exposed {c['exposed_seconds']} outside 0..total {c['total_seconds']}")
    dp = comm.get("data_parallel")
    if dp and dp["exposed_seconds"] > p["dp_allreduce_seconds"] + 1e-9 * max(1, p["dp_allreduce_seconds"]):
        sys.exit(f"check_comm: data_parallel exposed {dp['exposed_seconds']} > dp_allreduce_seconds "
                 f"{p['dp_allreduce_seconds']}")
    if len(sys.argv) > 2:
        share = float(sys.argv[2])
        tp = comm["tensor_parallel"]
        if abs(tp["exposed_seconds"] - share * tp["total_seconds"]) > 1e-6 * tp["total_seconds"]:
            sys.exit(f"check_comm: tensor_parallel exposed {tp['exposed_seconds']} != {share} x {tp['total_seconds']}")
    print(f"check_comm: {len(comm)} kinds agree")


if __name__ == "__main__":
    main()
