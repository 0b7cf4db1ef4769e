# The template of torch_pipelining.py: codegen/torch_pipelining.cc writes the lines between the two
# "planner template" markers, each PLAN_<name> replaced by the plan's value (a line holding only one
# stands for whole lines). The lines outside the markers define the names so that the template is a
# module Python tools check (tests/codegen/templates_lint.sh); docs/exports.md, "Templates".
PLAN_world = PLAN_pp = PLAN_dp = PLAN_tp = PLAN_per_rank = PLAN_m = PLAN_mbs = 1
PLAN_gb = 2
PLAN_stages = ["embedding", "block0", "final_layernorm", "lm_head", "loss"]
PLAN_layers, PLAN_hidden, PLAN_heads, PLAN_kv, PLAN_hd, PLAN_ffn, PLAN_seq, PLAN_vocab = 1, 16, 2, 2, 8, 64, 8, 32
PLAN_theta, PLAN_bias, PLAN_tie = 10000.0, False, False
PLAN_lr, PLAN_seed, PLAN_steps = 0.001, 0, 2
# ---- planner template begins ----
# torch.distributed.pipelining (torch 2.15) run of the plan: PLAN_world ranks, tp-pp-dp PLAN_tp-PLAN_pp-PLAN_dp, PLAN_sched.
#   torchrun --nproc-per-node PLAN_world torch_pipelining.py --steps N    trains the reference GPT on mock data, prints the loss
#   python torch_pipelining.py --reference --steps N                   the same model, data and seed in one process
# build(model, mesh, device) splits a user's model whose top-level submodules carry the planner's layer names.
WORLD, PP, DP, TP = PLAN_world, PLAN_pp, PLAN_dp, PLAN_tp
SCHEDULE = "PLAN_cls"
STAGES_PER_RANK = PLAN_per_rank
STAGE_STYLE = "PLAN_style"  # loop: rank r holds stages r + k pp; v: rank r holds r and 2 pp - 1 - r
N_MICROBATCHES = PLAN_m
MICROBATCH_SIZE = PLAN_mbs
GLOBAL_BATCH = PLAN_gb
# The plan's stages in model order: stage q's top-level modules (the planner's layer names).
STAGES = [
    PLAN_stages
]
GPT = dict(layers=PLAN_layers, hidden=PLAN_hidden, heads=PLAN_heads, kv_heads=PLAN_kv, head_dim=PLAN_hd, ffn=PLAN_ffn, seq=PLAN_seq, vocab=PLAN_vocab,
           act="PLAN_act", norm="PLAN_norm", position="PLAN_pos", rope_theta=PLAN_theta, bias=PLAN_bias, tie_embeddings=PLAN_tie)
OPTIMIZER, LEARNING_RATE, SEED, STEPS = "PLAN_opt", PLAN_lr, PLAN_seed, PLAN_steps

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


# ---- the reference model: the planner's GPT template, top-level modules named as the plan's layers ----
class Embedding(nn.Module):
    def __init__(self, g):
        super().__init__()
        self.word = nn.Embedding(g["vocab"], g["hidden"])
        self.position = nn.Embedding(g["seq"], g["hidden"]) if g["position"] == "learned" else None

    def forward(self, tokens):
        h = self.word(tokens)
        if self.position is not None:
            h = h + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        return h


def _norm(g):
    return nn.RMSNorm(g["hidden"]) if g["norm"] == "rmsnorm" else nn.LayerNorm(g["hidden"])


def _rope(x, theta):  # x: batch, heads, seq, head_dim (rotate-half form)
    d, s = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    f = torch.outer(torch.arange(s, device=x.device, dtype=torch.float32), inv)
    cos, sin = f.cos().to(x.dtype), f.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, g):
        super().__init__()
        h, hd, b = g["hidden"], g["head_dim"], g["bias"]
        self.head_dim, self.rope, self.theta = hd, g["position"] == "rope", g["rope_theta"]
        self.q = nn.Linear(h, g["heads"] * hd, bias=b)
        self.k = nn.Linear(h, g["kv_heads"] * hd, bias=b)
        self.v = nn.Linear(h, g["kv_heads"] * hd, bias=b)
        self.o = nn.Linear(g["heads"] * hd, h, bias=b)

    def forward(self, x):
        bsz, s, _ = x.shape  # under TP the projections hold this rank's heads: sizes read from the outputs
        q = self.q(x).view(bsz, s, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(bsz, s, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(bsz, s, -1, self.head_dim).transpose(1, 2)
        if self.rope:
            q, k = _rope(q, self.theta), _rope(k, self.theta)
        if k.shape[1] != q.shape[1]:  # GQA / MQA: each KV head serves heads / kv_heads query heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(bsz, s, -1))


class Mlp(nn.Module):
    def __init__(self, g):
        super().__init__()
        h, f, b = g["hidden"], g["ffn"], g["bias"]
        self.act = g["act"]
        self.fc1 = nn.Linear(h, f, bias=b)
        self.gate = nn.Linear(h, f, bias=b) if self.act == "swiglu" else None
        self.fc2 = nn.Linear(f, h, bias=b)

    def forward(self, x):
        a = self.fc1(x)
        if self.gate is not None:
            a = F.silu(self.gate(x)) * a
        elif self.act == "relu2":
            a = F.relu(a) ** 2
        else:
            a = F.gelu(a)
        return self.fc2(a)


class Block(nn.Module):
    def __init__(self, g):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = _norm(g), Attention(g), _norm(g), Mlp(g)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, g):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(g["vocab"], g["hidden"]) * 0.02)

    def forward(self, x):
        return F.linear(x, self.weight)


class Loss(nn.Identity):
    """The plan's `loss` layer: the schedule's loss_fn computes it on the last stage."""


class Gpt(nn.Module):
    def __init__(self, g, names):
        super().__init__()
        for n in names:
            if n == "embedding":
                m = Embedding(g)
            elif n.startswith("block"):
                m = Block(g)
            elif n in ("final_layernorm", "final_rmsnorm"):
                m = _norm(g)
            elif n == "lm_head":
                m = Head(g)
            elif n == "loss":
                m = Loss()
            else:
                raise ValueError(f"the reference GPT has no layer {n!r}")
            self.add_module(n, m)
        for m in self.modules():
            if isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        if g["tie_embeddings"]:
            self.lm_head.weight = self.embedding.word.weight

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


def reference_model(seed=None):
    torch.manual_seed(SEED if seed is None else seed)
    return Gpt(GPT, [n for stage in STAGES for n in stage])


def loss_fn(logits, target):
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


def mock_batch(step, vocab=None, seq=None):
    """The global batch of `step` (the same on every rank): sequences counting up mod vocab from a random start."""
    vocab, seq = vocab or GPT["vocab"], seq or GPT["seq"]
    gen = torch.Generator().manual_seed(SEED * 1000003 + step)
    start = torch.randint(0, vocab, (GLOBAL_BATCH, 1), generator=gen)
    x = (start + torch.arange(seq + 1)) % vocab
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


# ---- the plan's placement ----
def stage_ids(pp_rank):
    """This pipeline rank's stages: the loop (r, r + pp, ...) or DualPipeV's V (r, 2 pp - 1 - r)."""
    if STAGE_STYLE == "v":
        return [pp_rank, 2 * PP - 1 - pp_rank]
    return [pp_rank + k * PP for k in range(STAGES_PER_RANK)]


def stage_position(q):
    return (q if q < PP else 2 * PP - 1 - q) if STAGE_STYLE == "v" else q % PP


class StageModule(nn.Module):
    """The top-level submodules of one stage, run in model order."""

    def __init__(self, model, names):
        super().__init__()
        for n in names:
            self.add_module(n, getattr(model, n))

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


def _untie(stage_mods):
    """A weight shared by several stages (tied embeddings) gets a copy per later stage; returns
    [(param id, [(stage, copy)])] whose gradients tied_sync sums after each step."""
    owner, ties = {}, {}
    for q, sm in enumerate(stage_mods):
        for mod in sm.modules():
            for name, p in list(mod._parameters.items()):
                if p is None:
                    continue
                if id(p) in owner and owner[id(p)][0] != q:
                    copy = nn.Parameter(p.detach().clone())
                    mod._parameters[name] = copy
                    ties.setdefault(id(p), [(owner[id(p)][0], p)]).append((q, copy))
                else:
                    owner.setdefault(id(p), (q, p))
    return list(ties.values())


def reference_tp_plan(block):
    """parallelize_module's plan for a reference GPT block: Colwise q, k, v, fc1 (and gate), Rowwise o and fc2."""
    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(), "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
    if getattr(block.mlp, "gate", None) is not None:
        plan["mlp.gate"] = ColwiseParallel()
    return plan


def build(model, mesh, device, loss_fn=loss_fn, tp_plan=None):
    """Splits `model` (top-level submodules named as the plan's layers) into STAGES, keeps this rank's
    (STAGES_PER_RANK, placed by STAGE_STYLE), applies TP on mesh['tp'] to the blocks (tp_plan(block): a
    parallelize_module plan; default reference_tp_plan), and returns (stages, schedule, grad_sync, params):
    grad_sync() averages gradients over mesh['dp'] and sums tied weights; call it after schedule.step()
    and before optimizer.step() on params (this rank's parameters)."""
    from torch.distributed import pipelining

    stage_mods = [StageModule(model, names) for names in STAGES]
    ties = _untie(stage_mods)
    pp_rank = mesh["pp"].get_local_rank()
    ids = stage_ids(pp_rank)
    if TP > 1:
        for q in ids:
            for name, blk in stage_mods[q].named_children():
                if name.startswith("block"):
                    parallelize_module(blk, mesh["tp"], (tp_plan or reference_tp_plan)(blk))
    for q in ids:
        stage_mods[q].to(device)
    pp_group = mesh["pp"].get_group()
    stages = [pipelining.PipelineStage(stage_mods[q], q, len(STAGES), device, group=pp_group) for q in ids]
    cls = getattr(pipelining, SCHEDULE)
    single = SCHEDULE in ("ScheduleGPipe", "Schedule1F1B")
    schedule = cls(stages[0] if single else stages, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
    # Tied weights held on several pipeline ranks: a group per (dp, tp) coordinate over their ranks.
    tied = []
    for tie in ties:
        positions = sorted({stage_position(q) for q, _ in tie})
        group = None
        if len(positions) > 1:
            for d in range(DP):
                for t in range(TP):
                    g = dist.new_group([(p * DP + d) * TP + t for p in positions])
                    if (mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()) == (d, t):
                        group = g
        local = [p for q, p in tie if q in ids]
        if local:
            tied.append((local, group))
    params = list({id(p): p for q in ids for p in stage_mods[q].parameters()}.values())
    dp_group = mesh["dp"].get_group() if DP > 1 else None

    def grad_sync():
        with torch.no_grad():
            for local, group in tied:
                total = sum(p.grad for p in local)
                if group is not None:
                    dist.all_reduce(total, group=group)
                for p in local:
                    p.grad.copy_(total)
            if dp_group is not None:
                for p in params:
                    if p.grad is not None:
                        g = getattr(p.grad, "_local_tensor", p.grad)  # a DTensor's shard under TP
                        dist.all_reduce(g, group=dp_group)
                        g.div_(DP)

    return stages, schedule, grad_sync, params


def _optimizer(params):
    if OPTIMIZER == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE)
    return torch.optim.Adam(params, lr=LEARNING_RATE)


def reference(steps):
    """The same model, data, seed and optimizer in one process (no pipeline): the check of the pipelined run."""
    model = reference_model()
    opt = _optimizer(model.parameters())
    for step in range(steps):
        x, y = mock_batch(step)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)


def train(steps, device_kind):
    from torch.distributed.device_mesh import init_device_mesh

    cuda = device_kind == "cuda" or (device_kind == "auto" and torch.cuda.is_available())
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != WORLD:
        raise SystemExit(f"torch_pipelining.py: the plan has {WORLD} ranks (pp {PP} x dp {DP} x tp {TP}); "
                         f"run it with torchrun --nproc-per-node {WORLD}, not {world}")
    # Megatron's rank order (launch.yaml): tp fastest, then dp, then pp = this row-major mesh.
    owns_group = not dist.is_initialized()  # a driver that runs several plans in one torchrun keeps its group
    mesh = init_device_mesh("cuda" if cuda else "cpu", (PP, DP, TP), mesh_dim_names=("pp", "dp", "tp"))
    rank = dist.get_rank()
    pp_rank, dp_rank, tp_rank = (mesh[n].get_local_rank() for n in ("pp", "dp", "tp"))
    assert rank == (pp_rank * DP + dp_rank) * TP + tp_rank, "mesh rank order differs from launch.yaml's"
    model = reference_model()
    stages, schedule, grad_sync, params = build(model, mesh, device)
    held = sum(getattr(p, "_local_tensor", p).numel() for p in params)
    print(f"rank {rank}: pp {pp_rank} dp {dp_rank} tp {tp_rank} stages {[s.stage_index for s in stages]} of {len(STAGES)}, "
          f"{held} parameters, {SCHEDULE} {N_MICROBATCHES} microbatches", flush=True)
    opt = _optimizer(params) if params else None  # a stage of the loss alone holds no parameters
    first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
    local_batch = GLOBAL_BATCH // DP
    for step in range(steps):
        x, y = mock_batch(step)
        x = x[dp_rank * local_batch:(dp_rank + 1) * local_batch].to(device)
        y = y[dp_rank * local_batch:(dp_rank + 1) * local_batch].to(device)
        if opt is not None:
            opt.zero_grad(set_to_none=False)
        losses = []
        schedule.step(*((x,) if first else ()), target=y if last else None, losses=losses)
        grad_sync()
        if opt is not None:
            opt.step()
        if last:
            loss = torch.stack([l.detach().float() for l in losses]).mean()
            if DP > 1:
                dist.all_reduce(loss, group=mesh["dp"].get_group())
                loss /= DP
            if dp_rank == 0 and tp_rank == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
    dist.barrier()
    if owns_group:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="Runs the plan with torch.distributed.pipelining on the reference GPT and mock data.")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda + nccl when available, else cpu + gloo")
    ap.add_argument("--reference", action="store_true", help="one process, no pipeline: the losses the pipelined run must match")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default=OPTIMIZER)
    ap.add_argument("--lr", type=float, default=LEARNING_RATE)
    a = ap.parse_args()
    globals().update(OPTIMIZER=a.optimizer, LEARNING_RATE=a.lr)
    if a.reference:
        reference(a.steps)
    else:
        train(a.steps, a.device)


if __name__ == "__main__":
    main()
# ---- planner template ends ----
