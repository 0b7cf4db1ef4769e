"""Runs several generated torch_pipelining.py files in one process (the imports cost 5-10 s each).

  torchrun --nproc-per-node W torch_pipelining_driver.py train STEPS FILE...  each file's train() on one gloo group
  python torch_pipelining_driver.py reference STEPS FILE...                   each file's one-process reference()
Each file's output follows a line '== FILE' (on every rank). FILE@OPTIMIZER@LR runs it with that optimizer and learning rate.
"""
import importlib.util
import sys


def load(arg, i):
    path, *opt = arg.split("@")
    spec = importlib.util.spec_from_file_location(f"plan{i}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if opt:
        mod.OPTIMIZER, mod.LEARNING_RATE = opt[0], float(opt[1])
    return mod


def main():
    mode, steps, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if mode == "reference":
        for i, path in enumerate(paths):
            mod = load(path, i)
            print(f"== {path.split('@')[0]}", flush=True)
            mod.reference(steps)
        return
    import torch.distributed as dist

    dist.init_process_group("gloo")
    for i, path in enumerate(paths):
        mod = load(path, i)
        print(f"== {path.split('@')[0]}", flush=True)  # every rank: the test reads each rank's own log
        dist.barrier()
        mod.train(steps, "cpu")  # keeps the driver's group (it did not create it)
        dist.barrier()  # every rank's (flushed) lines of this file land before the next file's header
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
