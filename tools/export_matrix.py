#!/usr/bin/env python3
"""The exports' feature matrix of docs/exports.md, computed: one plan per feature, codegen, and per
target what codegen did.

  python3 tools/export_matrix.py PLANNER SOURCE_ROOT            # prints the matrix (markdown)
  python3 tools/export_matrix.py PLANNER SOURCE_ROOT --check F  # exit 1 unless F holds it verbatim

Each feature is a `planner solve` with the layout forced (models and clusters from configs/), then
`planner codegen`. A target's cell is: "yes" (its files written, no note), "note N" (written, with
codegen's note N below: what the engine runs differently), "refused N" (its .refused file written
instead, reason N below). The notes are codegen's own stderr lines ("planner: <file>: ..."), so the table cannot drift from
what codegen does: tests/exports/matrix_test.sh checks docs/exports.md against this output.
"""
import os
import re
import subprocess
import sys
import tempfile

L8 = ("configs/models/llama3-8b.yaml", "configs/clusters/dgx-h100.yaml")
FEATURES = [
    # (feature, model, cluster, gpus, solve flags[, (regex, replacement) applied to the plan file])
    ("TP 8 + SP, DP 2, distributed optimizer (ZeRO-1)", *L8, 16, "--tp 8 --pp 1 --cp 1 --sp on --zero 1"),
    ("TP 8 without SP, ZeRO-0", *L8, 16, "--tp 8 --pp 1 --cp 1 --sp off --zero 0"),
    ("ZeRO-2, no pipelining", *L8, 16, "--tp 8 --pp 1 --cp 1 --sp on --zero 2 --engine deepspeed"),
    ("ZeRO-3 / FSDP, no pipelining", *L8, 16, "--tp 8 --pp 1 --cp 1 --sp on --zero 3"),
    ("context parallelism (CP 2)", *L8, 16, "--tp 4 --pp 1 --cp 2 --sp on --zero 1"),
    ("PP 2, 1F1B, ZeRO-1", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b"),
    # Megatron-Core does not run GPipe, ZB-H1 or DualPipeV: its kernel-level search refuses them; the flat model
    # (--kernels none: every schedule, as on a cluster without a kernel table) plans them, as a user could.
    ("PP 2, GPipe", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule gpipe --global-batch 16 --kernels none"),
    ("PP 2, interleaved (v 2)", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule interleaved --vp 2"),
    ("PP 2, ZB-H1", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule zb-h1 --kernels none"),
    ("PP 2, DualPipeV", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule dualpipev --kernels none"),
    # The solver never plans it (no engine runs it); a plan edited to it, as a user could.
    ("ZeRO-2 with pipelining (plan edited)", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b", (r"(?m)^zero_stage: 1$", "zero_stage: 2")),
    ("full recompute", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b --recompute full"),
    ("selective recompute", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b --recompute selective"),
    ("FP8", *L8, 32, "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b --precision fp8"),
    ("FP8 parameters (--fp8-param-gather)", *L8, 32,
     "--tp 8 --pp 2 --cp 1 --sp on --zero 1 --schedule 1f1b --precision fp8 --fp8-param-gather"),
    ("MoE, expert parallelism (EP 8)", "configs/models/mixtral-8x7b.yaml", "configs/clusters/dgx-h100.yaml", 64,
     "--tp 1 --pp 4 --cp 1 --ep 8 --zero 1 --schedule 1f1b"),
    ("MLA + MTP (DeepSeek-V3)", "configs/models/deepseek-v3.yaml", "configs/clusters/h800.yaml", 2048,
     "--pp 16 --ep 64 --tp 1 --cp 1 --zero 1 --schedule 1f1b"),
    ("CNN layer list (VGG-16), PP 2", "configs/models/vgg16.yaml", "configs/clusters/dgx-a100.yaml", 2,
     "--pp 2 --tp 1 --zero 0 --schedule 1f1b"),
    ("per-stage replication 2-1-1, PipeDream's asynchronous schedule", "configs/models/vgg16.yaml", "configs/clusters/dgx-a100.yaml", 4,
     "--schedule pipedream --replication 2-1-1"),
    # LoRA: codegen writes the megatron-bridge export alone (every other target trains every weight: codegen's
    # error, shown as their refusal).
    ("LoRA rank 16 on packed samples (Llama 3 70B)", "configs/models/llama3-70b-lora.yaml",
     "configs/clusters/dgx-h100.yaml", 8, "--precision fp8 --tp 2 --pp 4 --vp 20 --sp on"),
    ("parameter-server gradient sync (dp_comm ps)", "configs/models/tiny-gpt.yaml", "configs/clusters/byteps.yaml", 16,
     "--pp 1 --tp 1 --zero 0 --schedule 1f1b --dp-comm ps --ps-servers 4"),
]
# target: (its main file, its refusal file, the prefix of its notes)
TARGETS = [
    ("Megatron-LM", "megatron.args", "megatron.args.refused", "megatron.args"),
    ("Megatron-Bridge", "megatron_bridge.py", "megatron_bridge.py.refused", "megatron_bridge.py"),
    ("DeepSpeed", "deepspeed/ds_config.json", "deepspeed/refused.txt", "deepspeed"),
    ("torchtitan", "torchtitan.toml", "torchtitan.toml.refused", "torchtitan"),
    ("torch.distributed.pipelining", "torch_pipelining.py", "torch_pipelining.py.refused", "torch_pipelining"),
]


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def matrix(planner, src):
    notes, rows = [], []

    def ref(text):
        if text not in notes:
            notes.append(text)
        return notes.index(text) + 1

    with tempfile.TemporaryDirectory() as tmp:
        for i, (feature, model, cluster, gpus, flags, *edit) in enumerate(FEATURES):
            plan = os.path.join(tmp, f"f{i}.plan.yaml")
            r = run([planner, "-q", "solve", "--gpus", str(gpus), "--model", os.path.join(src, model), "--cluster",
                     os.path.join(src, cluster), "-o", plan] + flags.split(), tmp)
            if r.returncode != 0:
                raise SystemExit(f"export_matrix: solve for '{feature}' failed: {r.stderr.strip()}")
            if edit:
                text = open(plan).read()
                edited = re.sub(edit[0][0], edit[0][1], text)
                if edited == text:
                    raise SystemExit(f"export_matrix: the edit of '{feature}' matched nothing in its plan")
                open(plan, "w").write(edited)
            out = os.path.join(tmp, f"f{i}")
            r = run([planner, "codegen", plan, "-o", out], tmp)
            lora = ""  # codegen's refusal of every target but megatron-bridge (a LoRA plan)
            if r.returncode != 0 and "field 'gpt.lora': " in r.stderr:
                lora = r.stderr.strip().split("field 'gpt.lora': ", 1)[1]
                r = run([planner, "codegen", plan, "-o", out, "--export", "megatron-bridge"], tmp)
            if r.returncode != 0:
                raise SystemExit(f"export_matrix: codegen for '{feature}' failed: {r.stderr.strip()}")
            lines = [l[len("planner: "):] for l in r.stderr.splitlines() if l.startswith("planner: ")]
            cells = []
            for _, main, refused, prefix in TARGETS:
                if lora and prefix != "megatron_bridge.py":
                    cells.append(f"refused {ref(lora)}")
                elif os.path.exists(os.path.join(out, refused)):
                    cells.append(f"refused {ref(open(os.path.join(out, refused)).read().strip())}")
                elif os.path.exists(os.path.join(out, main)):
                    mine = [l for l in lines if l.startswith(prefix)]
                    cells.append("yes" if not mine else "note " + ", ".join(str(ref(l)) for l in mine))
                else:
                    cells.append("not written")
            rows.append((feature, cells))
    out = ["| plan feature | " + " | ".join(t[0] for t in TARGETS) + " |", "|---" * (len(TARGETS) + 1) + "|"]
    out += [f"| {f} | " + " | ".join(c) + " |" for f, c in rows]
    out += [""] + [f"{k}. {n}" for k, n in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--check"):
        raise SystemExit(__doc__)
    m = matrix(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
    if len(sys.argv) == 3:
        sys.stdout.write(m)
        return
    doc = open(sys.argv[4]).read()
    if m not in doc:
        sys.stdout.write(m)
        raise SystemExit(f"export_matrix: {sys.argv[4]} does not hold the matrix above (regenerate it: python3 tools/export_matrix.py PLANNER .)")
    print(f"export_matrix: {sys.argv[4]} holds the computed matrix ({len(FEATURES)} features x {len(TARGETS)} targets)")


if __name__ == "__main__":
    main()
