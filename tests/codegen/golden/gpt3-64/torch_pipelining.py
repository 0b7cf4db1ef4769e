# torch.distributed.pipelining (torch 2.15) run of the plan: 64 ranks, tp-pp-dp 8-8-1, interleaved.
#   torchrun --nproc-per-node 64 torch_pipelining.py --steps N    trains the reference GPT on mock data, prints the loss
#   python torch_pipelining.py --reference --steps N                   the same model, data and seed in one process
# build(model, mesh, device) splits a user's model whose top-level submodules carry the planner's layer names.
WORLD, PP, DP, TP = 64, 8, 1, 8
SCHEDULE = "ScheduleInterleaved1F1B"
STAGES_PER_RANK = 4
STAGE_STYLE = "loop"  # loop: rank r holds stages r + k pp; v: rank r holds r and 2 pp - 1 - r
N_MICROBATCHES = 128
MICROBATCH_SIZE = 1
GLOBAL_BATCH = 128
# The plan's stages in model order: stage q's top-level modules (the planner's layer names).
STAGES = [
    ["embedding", "block0", "block1", "block2"],
    ["block3", "block4", "block5"],
    ["block6", "block7", "block8"],
    ["block9", "block10", "block11"],
    ["block12", "block13", "block14"],
    ["block15", "block16", "block17"],
    ["block18", "block19", "block20"],
    ["block21", "block22", "block23"],
    ["block24", "block25", "block26"],
    ["block27", "block28", "block29"],
    ["block30", "block31", "block32"],
    ["block33", "block34", "block35"],
    ["block36", "block37", "block38"],
    ["block39", "block40", "block41"],
    ["block42", "block43", "block44"],
    ["block45", "block46", "block47"],
    ["block48", "block49", "block50"],
    ["block51", "block52", "block53"],
    ["block54", "block55", "block56"],
    ["block57", "block58", "block59"],
    ["block60", "block61", "block62"],
    ["block63", "block64", "block65"],
    ["block66", "block67", "block68"],
    ["block69", "block70", "block71"],
    ["block72", "block73", "block74"],
    ["block75", "block76", "block77"],
    ["block78", "block79", "block80"],
    ["block81", "block82", "block83"],
    ["block84", "block85", "block86"],
    ["block87", "block88", "block89"],
    ["block90", "block91", "block92"],
    ["block93", "block94", "block95", "final_layernorm", "lm_head", "loss"],
]
GPT = dict(layers=96, hidden=12288, heads=96, kv_heads=96, head_dim=128, ffn=49152, seq=2048, vocab=51200,
           act="gelu", norm="layernorm", position="learned", rope_theta=10000, bias=True, tie_embeddings=True)
OPTIMIZER, LEARNING_RATE, SEED, STEPS = "adam", 0.001, 1, 20
