# torch.distributed.pipelining (torch 2.15) run of the plan: 2 ranks, tp-pp-dp 1-2-1, 1f1b.
#   torchrun --nproc-per-node 2 torch_pipelining.py --steps N    trains the reference GPT on mock data, prints the loss
#   python torch_pipelining.py --reference --steps N                   the same model, data and seed in one process
# build(model, mesh, device) splits a user's model whose top-level submodules carry the planner's layer names.
WORLD, PP, DP, TP = 2, 2, 1, 1
SCHEDULE = "Schedule1F1B"
STAGES_PER_RANK = 1
STAGE_STYLE = "loop"  # loop: rank r holds stages r + k pp; v: rank r holds r and 2 pp - 1 - r
N_MICROBATCHES = 32
MICROBATCH_SIZE = 1
GLOBAL_BATCH = 32
# The plan's stages in model order: stage q's top-level modules (the planner's layer names).
STAGES = [
    ["embedding", "block0", "block1"],
    ["block2", "block3", "final_layernorm", "lm_head", "loss"],
]
GPT = dict(layers=4, hidden=128, heads=4, kv_heads=4, head_dim=32, ffn=512, seq=64, vocab=512,
           act="gelu", norm="layernorm", position="learned", rope_theta=10000, bias=True, tie_embeddings=True)
OPTIMIZER, LEARNING_RATE, SEED, STEPS = "adam", 0.001, 1, 20
