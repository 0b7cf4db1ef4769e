# torch.distributed.pipelining (torch 2.15) run of the plan: 64 ranks, tp-pp-dp 4-2-8, interleaved.
#   torchrun --nproc-per-node 64 torch_pipelining.py --steps N    trains the reference GPT on mock data, prints the loss
#   python torch_pipelining.py --reference --steps N                   the same model, data and seed in one process
# build(model, mesh, device) splits a user's model whose top-level submodules carry the planner's layer names.
WORLD, PP, DP, TP = 64, 2, 8, 4
SCHEDULE = "ScheduleInterleaved1F1B"
STAGES_PER_RANK = 2
STAGE_STYLE = "loop"  # loop: rank r holds stages r + k pp; v: rank r holds r and 2 pp - 1 - r
N_MICROBATCHES = 32
MICROBATCH_SIZE = 2
GLOBAL_BATCH = 512
# The plan's stages in model order: stage q's top-level modules (the planner's layer names).
STAGES = [
    ["embedding", "block0", "block1", "block2", "block3", "block4", "block5", "block6", "block7"],
    ["block8", "block9", "block10", "block11", "block12", "block13", "block14", "block15", "block16"],
    ["block17", "block18", "block19", "block20", "block21", "block22", "block23", "block24", "block25"],
    ["block26", "block27", "block28", "block29", "block30", "block31", "final_rmsnorm", "lm_head", "loss"],
]
GPT = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, seq=8192, vocab=128256,
           act="swiglu", norm="rmsnorm", position="rope", rope_theta=500000, bias=False, tie_embeddings=False)
OPTIMIZER, LEARNING_RATE, SEED, STEPS = "adam", 0.001, 1, 20
