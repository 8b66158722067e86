#!/usr/bin/env python3
"""Training throughput, trainer vs PyTorch, side by side in one run.

For each model (configs/fashion_mnist_{mlp,cnn,resnet}.yaml and the same
module in bench/torch_peer.py) both sides train on a fixed batch of 128 with
SGD + momentum on the same number of threads; compute only (the loader is
benchmarked separately). Reports samples/s, the ratio and each process's
peak RSS. Run from the repository root after building:

    /usr/bin/python3 bench/train_bench.py [--models mlp cnn] [--threads 2] [--steps 50]
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    """Runs cmd, returns (stdout, peak RSS in MiB) of that child alone."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out}")
    return out, usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn", "resnet"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()

    results = []
    for model in args.models:
        config = os.path.join(ROOT, "configs", f"fashion_mnist_{model}.yaml")
        out, trainer_rss = run([args.trainer, "time", config, f"backend.threads={args.threads}",
                                "data.workers=0", "--steps", str(args.steps)])
        m = re.search(r"whole step ([\d.]+) ms \(([\d.]+) samples/s\)", out)
        o = re.search(r"framework overhead outside kernels: [\d.]+ ms \(([\d.]+)%", out)
        peer_out, peer_rss = run([sys.executable, os.path.join(ROOT, "bench", "torch_peer.py"), model,
                                  "--threads", str(args.threads), "--steps", str(args.steps)])
        peer = json.loads(peer_out.strip().splitlines()[-1])
        r = {"model": model, "threads": args.threads, "batch": 128,
             "trainer_samples_per_s": float(m.group(2)), "trainer_step_ms": float(m.group(1)),
             "trainer_overhead_pct": float(o.group(1)) if o else None,
             "pytorch_samples_per_s": peer["samples_per_s"], "pytorch_step_ms": peer["step_ms"],
             "ratio": float(m.group(2)) / peer["samples_per_s"],
             "trainer_peak_rss_mib": trainer_rss, "pytorch_peak_rss_mib": peer_rss,
             "peer": peer["peer"]}
        results.append(r)

    print(f"{'model':8} {'trainer samples/s':>18} {'pytorch samples/s':>18} {'ratio':>7} "
          f"{'trainer RSS MiB':>16} {'pytorch RSS MiB':>16}")
    for r in results:
        print(f"{r['model']:8} {r['trainer_samples_per_s']:18.0f} {r['pytorch_samples_per_s']:18.0f} "
              f"{r['ratio']:6.2f}x {r['trainer_peak_rss_mib']:16.0f} {r['pytorch_peak_rss_mib']:16.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
