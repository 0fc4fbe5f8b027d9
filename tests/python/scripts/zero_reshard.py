"""ZeRO checkpoints across world sizes: a job of 4 ranks (stage 3, Adam) trains, saves a checkpoint
and trains on; a job of 2 ranks (stage 2) and one of 1 rank (stage 1) load that checkpoint and train
on over the same global batches. Each must end where the 4-rank job ended (float32, within 1e-5
relative: the ranks sum their gradients in another order). A consolidated state dict of the
checkpoint, loaded into a plain torch model, must hold exactly the parameters at the save.

    /usr/bin/python3 zero_reshard.py --chorusrun build/bin/chorusrun     # the whole test
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

SAVE_AT, MORE_STEPS = 3, 3
GLOBAL_ROWS = 8  # split evenly over 4, 2 or 1 ranks
TOLERANCE = 1e-5


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))


def train(model, zero, comm, steps):
    rows = GLOBAL_ROWS // comm.size
    for step in steps:
        generator = torch.Generator().manual_seed(500 + step)
        x = torch.randn(GLOBAL_ROWS, 10, generator=generator)
        y = torch.randn(GLOBAL_ROWS, 3, generator=generator)
        mine = slice(comm.rank * rows, (comm.rank + 1) * rows)
        zero.zero_grad()
        ((model(x[mine]) - y[mine]) ** 2).mean().backward()
        zero.step()


def as_arrays(parameters):
    return {name: t.numpy() for name, t in parameters.items()}


def save_phase(directory):
    import chorus.distributed as dist
    import chorus.torch as ct
    comm = dist.get_communicator()
    model = make_model(comm.rank)
    zero = ct.ZeroOptimizer(model, optim="adam", stage=3, lr=0.02, weight_decay=0.01)
    train(model, zero, comm, range(SAVE_AT))
    zero.save_checkpoint(os.path.join(directory, "checkpoint"))
    at_save = as_arrays(zero.gathered_parameters())
    train(model, zero, comm, range(SAVE_AT, SAVE_AT + MORE_STEPS))
    finished = as_arrays(zero.gathered_parameters())
    if comm.rank == 0:
        np.savez(os.path.join(directory, "at_save.npz"), **at_save)
        np.savez(os.path.join(directory, "finished.npz"), **finished)


def resume_phase(directory, stage):
    import chorus.distributed as dist
    import chorus.torch as ct
    comm = dist.get_communicator()
    model = make_model(100 + comm.rank)  # anything: the checkpoint decides
    zero = ct.ZeroOptimizer(model, optim="adam", stage=stage, lr=0.02, weight_decay=0.01)
    zero.load_checkpoint(os.path.join(directory, "checkpoint"))
    assert zero.steps == SAVE_AT, zero.steps
    train(model, zero, comm, range(SAVE_AT, SAVE_AT + MORE_STEPS))
    expected = np.load(os.path.join(directory, "finished.npz"), allow_pickle=False)
    for name, actual in zero.gathered_parameters().items():
        scale = max(float(np.abs(expected[name]).max()), 1e-12)
        error = float(np.abs(actual.numpy() - expected[name]).max()) / scale
        print(f"rank {comm.rank}: {comm.size} ranks, stage {stage}: {name} relative error "
              f"{error:.2e}")
        assert error <= TOLERANCE, f"{name}: {error} > {TOLERANCE}"


def consolidate_phase(directory):
    import chorus.torch as ct
    path = ct.consolidate_checkpoint(os.path.join(directory, "checkpoint"),
                                     os.path.join(directory, "full.chorus"))
    model = make_model(7)
    missing, unexpected = model.load_state_dict(ct.load_state_dict(path), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    expected = np.load(os.path.join(directory, "at_save.npz"), allow_pickle=False)
    for name, p in model.named_parameters():
        assert np.array_equal(p.detach().numpy(), expected[name]), name
    print("consolidated state dict holds the parameters at the save")


def drive(chorusrun):
    with tempfile.TemporaryDirectory(prefix="chorus-zero-reshard-") as directory:
        runs = [(4, ["save"]), (2, ["resume", "2"]), (1, ["resume", "1"])]
        for ranks, phase in runs:
            command = [chorusrun, "-np", str(ranks), sys.executable, os.path.abspath(__file__),
                       "--dir", directory, "--phase", *phase]
            print("$", " ".join(command), flush=True)
            if subprocess.run(command, timeout=240).returncode != 0:
                return 1
        consolidate_phase(directory)
    print("a checkpoint saved by 4 ranks resumed on 2 and on 1 exactly as it would have gone on")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chorusrun", help="run the whole test with this launcher")
    parser.add_argument("--dir")
    parser.add_argument("--phase", nargs="+")
    args = parser.parse_args()
    if args.chorusrun:
        return drive(args.chorusrun)
    torch.set_num_threads(1)
    if args.phase[0] == "save":
        save_phase(args.dir)
    else:
        resume_phase(args.dir, int(args.phase[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
