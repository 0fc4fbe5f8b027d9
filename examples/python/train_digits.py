"""The main job: data-parallel training of a small MLP on scikit-learn's digits (8x8 images of
handwritten digits, 1797 samples, shipped with python3-sklearn: nothing is downloaded).

Each rank trains on its share of every epoch (chorus.torch.DistributedSampler); gradients are
averaged across ranks during backward (chorus.torch.DistributedDataParallel, or with --zero 1|2|3
chorus.torch.ZeroOptimizer, which also partitions the optimizer state, the gradients and at stage 3
the parameters). Rank 0 prints the training loss and test accuracy after every epoch; the job fails
if the final test accuracy is below --target.

    build/bin/chorusrun -np 4 /usr/bin/python3 examples/python/train_digits.py [--zero 3]
(with PYTHONPATH=build/python, or chorus installed; `make demo` runs it). --device cuda trains on
each rank's GPU (cuda:local_rank), data parallel or ZeRO.

--torch ddp|fsdp trains the same model with torch's own DistributedDataParallel or
FullyShardedDataParallel (FSDP needs CUDA) over torch.distributed with the "chorus" backend, as an
unchanged torch program would; --against BACKEND then trains it again over torch's BACKEND (gloo,
or nccl on CUDA) from the same start on the same batches, and checks that both end with the same
parameters (to float32 rounding) and report both accuracies.
"""

import argparse
import os
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import chorus
import chorus.distributed as dist
import chorus.torch


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--target", type=float, default=0.95, help="final test accuracy to reach")
    parser.add_argument("--comm-hook", choices=("none", "fp16", "bf16", "powersgd"), default="none",
                        help="DistributedDataParallel's communication hook (chorus.torch.hooks)")
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                        help="ZeRO stage (0: DistributedDataParallel and torch.optim.Adam)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the model trains (cuda: this rank's GPU)")
    parser.add_argument("--torch", choices=("none", "ddp", "fsdp"), default="none",
                        help="torch's DistributedDataParallel or FullyShardedDataParallel over "
                             "torch.distributed's \"chorus\" backend instead of chorus.torch's")
    parser.add_argument("--against", default=None, metavar="BACKEND",
                        help="with --torch: train again over torch's BACKEND (gloo, nccl) and "
                             "check that the parameters agree")
    args = parser.parse_args()
    if args.torch == "none" and args.against:
        parser.error("--against compares --torch ddp or fsdp with another torch backend")
    if args.torch != "none" and (args.zero or args.comm_hook != "none"):
        parser.error("--torch trains with torch's wrappers: no --zero, no --comm-hook")
    if args.torch == "fsdp" and args.device != "cuda":
        parser.error("torch's FullyShardedDataParallel needs --device cuda")
    return args


def load_data():
    """The same split on every rank: 80 % train, 20 % test, pixels scaled to [0, 1]."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0,
                                                        stratify=y)
    as_dataset = lambda a, b: torch.utils.data.TensorDataset(torch.from_numpy(a),
                                                             torch.from_numpy(b))
    return as_dataset(x_train, y_train), as_dataset(x_test, y_test)


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def global_sum(*values):
    """Sums of per-rank numbers over every rank (one fused allreduce)."""
    return chorus.allreduce(np.array(values, dtype=np.float64)).tolist()


def evaluate(model, test_set, rank, size, device):
    """Test accuracy over the whole test set: each rank scores every size-th sample from its rank
    on, and the counts are summed."""
    x, y = (t.to(device) for t in test_set[list(range(rank, len(test_set), size))])
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).sum().item()
    total_correct, total = global_sum(correct, len(y))
    return total_correct / total


def progress_bar(done, total, width=20):
    filled = round(width * done / total)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def use_device(args, config):
    if args.device == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise SystemExit("train_digits: --device cuda, but torch sees no CUDA device")
    if gpus < config.local_size:
        # More ranks than GPUs: NCCL takes two ranks on one GPU only as hosts of their own,
        # over loopback sockets (slow, but it runs; set before chorus starts NCCL).
        os.environ.setdefault("NCCL_HOSTID", f"digits-rank-{config.rank}")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    device = torch.device("cuda", config.local_rank % gpus)
    torch.cuda.set_device(device)
    return device


def chorus_parallel(args, device):
    """chorus.torch's DistributedDataParallel (with its hooks) and Adam, or its ZeroOptimizer."""
    if args.zero:
        model = make_model().to(device)
        return model, chorus.torch.ZeroOptimizer(model, optim="adam", stage=args.zero, lr=args.lr)
    model = chorus.torch.DistributedDataParallel(make_model().to(device))
    if args.comm_hook != "none":
        import chorus.torch.hooks as hooks
        if args.comm_hook == "powersgd":
            model.register_comm_hook(hooks.PowerSGDState(start_powerSGD_iter=10),
                                     hooks.powerSGD_hook)
        else:
            model.register_comm_hook(None, getattr(hooks, f"{args.comm_hook}_compress_hook"))
    return model, torch.optim.Adam(model.parameters(), lr=args.lr)


def torch_parallel(kind, group, device, lr):
    """torch's own wrapper over the process group `group`, from rank 0's start (both wrappers
    broadcast it), and Adam."""
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(
            make_model().to(device), process_group=group,
            device_ids=[device] if device.type == "cuda" else None)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        model = FullyShardedDataParallel(make_model().to(device), process_group=group,
                                         device_id=device, sync_module_states=True,
                                         use_orig_params=True)
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def full_parameters(model, kind):
    """Every parameter, whole and flat, on the host (collective for FSDP)."""
    if kind == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel
        with FullyShardedDataParallel.summon_full_params(model):
            return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.module.parameters()])


def train(args, config, model, optimizer, train_set, test_set, device, label):
    """--epochs epochs over each rank's share; rank 0 prints each epoch. The final accuracy."""
    sampler = chorus.torch.DistributedSampler(train_set, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    started = time.perf_counter()
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        loss_sum, seen = 0.0, 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # gradients are averaged across ranks here
            optimizer.step()
            loss_sum += loss.item() * len(y)
            seen += len(y)
        total_loss, total_seen = global_sum(loss_sum, seen)
        model.eval()
        accuracy = evaluate(model, test_set, config.rank, config.size, device)
        if config.rank == 0:
            print(f"{label}epoch {epoch:2d}/{args.epochs} {progress_bar(epoch, args.epochs)} "
                  f"loss {total_loss / total_seen:.4f}  test accuracy {accuracy:6.2%}  "
                  f"({time.perf_counter() - started:.1f} s)", flush=True)
    return accuracy


def train_torch(args, config, train_set, test_set, device):
    """--torch: torch's wrapper over the "chorus" backend, then (--against) over another one."""
    import torch.distributed as tdist
    tdist.init_process_group("chorus")  # env://, which chorusrun sets
    backends = ["chorus"] + ([args.against] if args.against else [])
    accuracies, parameters = {}, {}
    for backend in backends:
        group = tdist.group.WORLD if backend == "chorus" else tdist.new_group(backend=backend)
        torch.manual_seed(config.rank)  # the same start for both: rank 0's, broadcast
        model, optimizer = torch_parallel(args.torch, group, device, args.lr)
        accuracies[backend] = train(args, config, model, optimizer, train_set, test_set, device,
                                    f"[torch {args.torch} over {backend}] ")
        parameters[backend] = full_parameters(model, args.torch)
    if args.against:
        difference = float((parameters["chorus"] - parameters[args.against]).abs().max())
        scale = float(parameters[args.against].abs().max())
        same = difference <= 1e-4 * scale + 1e-5
        if config.rank == 0:
            print(f"torch {args.torch} over chorus: accuracy {accuracies['chorus']:.2%}; over "
                  f"{args.against}: {accuracies[args.against]:.2%}; largest parameter difference "
                  f"{difference:.3g} (of {scale:.3g}): "
                  f"{'matches' if same else 'DIFFERS FROM'} {args.against}", flush=True)
        if not same:
            raise SystemExit(1)
    tdist.destroy_process_group()
    return accuracies["chorus"]


def main():
    args = parse_args()
    torch.set_num_threads(1)  # ranks share the cores
    config = dist.get_config()
    train_set, test_set = load_data()
    device = use_device(args, config)
    if config.rank == 0:
        how = (f"torch {args.torch} over torch.distributed" if args.torch != "none" else
               f"ZeRO stage {args.zero}" if args.zero else "data parallel") + f", on {args.device}"
        print(f"training on {config.size} ranks ({how}): {len(train_set)} training and "
              f"{len(test_set)} test samples, batch {args.batch_size} per rank, {args.epochs} "
              "epochs", flush=True)
    if args.torch != "none":
        accuracy = train_torch(args, config, train_set, test_set, device)
    else:
        torch.manual_seed(config.rank)  # different on purpose: chorus starts every rank from
        model, optimizer = chorus_parallel(args, device)  # rank 0's
        accuracy = train(args, config, model, optimizer, train_set, test_set, device, "")
    if config.rank == 0:
        verdict = "reached" if accuracy >= args.target else "MISSED"
        print(f"final test accuracy {accuracy:.2%}: {verdict} the target {args.target:.0%}",
              flush=True)
    if accuracy < args.target:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
