# Writes cpu_trace.json: torch.profiler (record_shapes=True) over one training step of a small Llama block
# (RMSNorm, fused QKV, causal SDPA, SwiGLU) in bf16 on the CPU, as planner calibrate's trace tests use it
# (tests/cli/calibrate_test.sh adds GPU kernel events of the documented shape to it). Made with torch 2.15.0
# (the exports venv); llama_block_cpu_trace.json is its output with the autograd flow events dropped and the
# operators kept that the tests read or that surround them (see trim() below).
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s, h=256, heads=4, ffn=688):
        super().__init__()
        s.h, s.heads = h, heads
        s.n1 = nn.RMSNorm(h); s.n2 = nn.RMSNorm(h)
        s.qkv = nn.Linear(h, 3*h, bias=False); s.o = nn.Linear(h, h, bias=False)
        s.w1 = nn.Linear(h, ffn, bias=False); s.w3 = nn.Linear(h, ffn, bias=False); s.w2 = nn.Linear(ffn, h, bias=False)
    def forward(s, x):
        b, t, h = x.shape
        q, k, v = s.qkv(s.n1(x)).view(b, t, 3, s.heads, h // s.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + s.o(a.transpose(1, 2).reshape(b, t, h))
        y = s.n2(x)
        return x + s.w2(F.silu(s.w1(y)) * s.w3(y))
m = Block().to(torch.bfloat16)
x = torch.randn(2, 128, 256, dtype=torch.bfloat16)
opt = torch.optim.AdamW(m.parameters())
m(x).float().pow(2).mean().backward(); opt.step(); opt.zero_grad()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(1):
        with torch.profiler.record_function("ProfilerStep#%d" % _):
            m(x).float().pow(2).mean().backward(); opt.step(); opt.zero_grad()
prof.export_chrome_trace("cpu_trace.json")


def trim(path="cpu_trace.json", out="llama_block_cpu_trace.json"):
    import json
    d = json.load(open(path))
    keep = {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
            "aten::t", "aten::rms_norm", "aten::silu", "aten::mul", "aten::add", "ProfilerStep#0"}
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") != "fwdbwd" and (e.get("cat") != "cpu_op" or e.get("name") in keep)]
    open(out, "w").write(json.dumps(d))

trim()
