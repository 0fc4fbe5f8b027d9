"""Per-rank memory of ZeRO stages against the ZeRO paper's formulas (arXiv 1910.02054, Table 1).

For the benchmark model of bench/train_bench.py (4 Linear layers of 1024, Ψ = 4.2 M parameters),
each stage runs one training step under chorusrun at N = 1, 2 and 4 ranks, in bfloat16 mixed
precision with Adam (the paper's K = 12), and reports what the rank's ZeroEngine allocated
(memory_report()) next to the formula. Then the paper's 7.5 B-parameter model on 64 ranks,
computed by the same formula code (chorus.torch.zero_memory_prediction).

    /usr/bin/python3 bench/zero_memory.py [--build build] [--ranks 1 2 4]
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench import BATCH, WIDTH, make_model  # noqa: E402

MB = 2 ** 20
GB = 1e9  # the paper's table uses decimal gigabytes


def worker(stage, mixed):
    import torch
    import chorus.distributed as dist
    import chorus.torch as ct
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model(torch)
    zero = ct.ZeroOptimizer(model, optim="adam", stage=stage, lr=1e-4,
                            mixed_precision="bf16" if mixed else None)
    dtype = torch.bfloat16 if mixed else torch.float32
    x, y = torch.randn(BATCH, WIDTH, dtype=dtype), torch.randn(BATCH, WIDTH, dtype=dtype)
    zero.zero_grad()
    ((model(x) - y) ** 2).mean().backward()  # torch 1.13 has no bfloat16 mse_loss on CPU
    zero.step()
    report = zero.memory_report()
    # Ranks differ by at most the padding; rank 0's report goes in the table.
    if dist.get_config().rank == 0:
        print("RESULT " + json.dumps(report), flush=True)


def run(args, ranks, stage, mixed):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    command = [os.path.join(args.build, "bin", "chorusrun"), "-np", str(ranks), sys.executable,
               os.path.abspath(__file__), "--worker", str(stage)] + (["--fp32"] if not mixed else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    for line in done.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"stage {stage} on {ranks} failed:\n{done.stdout}\n{done.stderr}")


def driver(args):
    print("| precision | stage | N | parameters MB | gradients MB | optimizer MB | measured MB "
          "| predicted MB | difference | padding allowance MB | peak buffers MB |")
    print("|---" * 11 + "|")
    for mixed in (True, False):
        for stage in (1, 2, 3):
            for ranks in args.ranks:
                r = run(args, ranks, stage, mixed)
                m, p = r["measured"], r["predicted"]
                difference = (m["total"] - p["total"]) / p["total"]
                print(f"| {'bf16, K=12' if mixed else 'fp32, K=8'} | {stage} | {ranks} | "
                      f"{m['parameters'] / MB:.2f} | {m['gradients'] / MB:.2f} | "
                      f"{m['optimizer_state'] / MB:.2f} | {m['total'] / MB:.2f} | "
                      f"{p['total'] / MB:.2f} | {difference:+.3%} | "
                      f"{r['padding_bytes'] / MB:.3f} | {r['peak_buffers'] / MB:.1f} |",
                      flush=True)
    print("\nThe paper's model: Ψ = 7.5 B, N = 64, mixed-precision Adam (K = 12), GB per rank")
    sys.path.insert(0, os.path.join(args.build, "python"))
    from chorus.torch import zero_memory_prediction
    psi = 7.5e9
    print("| stage | predicted GB | the paper's Table 1 |")
    print("|---|---|---|")
    baseline = (2 + 2 + 12) * psi
    print(f"| data parallel | {baseline / GB:.1f} | 120 |")
    for stage, paper in zip((1, 2, 3), ("31.4", "16.6", "1.9")):
        total = zero_memory_prediction(psi, 64, stage, k=12, bytes_per_element=2)["total"]
        print(f"| {stage} | {total / GB:.2f} | {paper} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fp32", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, not args.fp32)
    else:
        driver(args)


if __name__ == "__main__":
    main()
