#!/usr/bin/env python3
"""Training throughput, trainer vs PyTorch, side by side in one run.

For each model (configs/fashion_mnist_{mlp,cnn,resnet}.yaml and the same
module in bench/torch_peer.py) both sides train on a fixed batch of 128 with
SGD + momentum on the same number of threads; compute only (the loader is
benchmarked separately). Reports samples/s, the ratio and each process's
peak RSS. On a shared machine one run of each side is at the mercy of the
scheduler, so the two sides alternate --repeat times and the medians are
reported (the ratio is the median of the per-pair ratios). Run from the
repository root after building:

    /usr/bin/python3 bench/train_bench.py [--models mlp cnn] [--threads 2] [--steps 50] [--repeat 3]
"""
import argparse
import json
import os
import re
import statistics
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
    ap.add_argument("--repeat", type=int, default=3,
                    help="alternate the two sides this many times, report medians")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()

    results = []
    for model in args.models:
        config = os.path.join(ROOT, "configs", f"fashion_mnist_{model}.yaml")
        runs = []
        for _ in range(max(1, args.repeat)):
            out, trainer_rss = run([args.trainer, "time", config, f"backend.threads={args.threads}",
                                    "data.workers=0", "--steps", str(args.steps)])
            m = re.search(r"whole step ([\d.]+) ms \(([\d.]+) samples/s\)", out)
            o = re.search(r"framework overhead outside kernels: [\d.]+ ms \(([\d.]+)%", out)
            peer_out, peer_rss = run([sys.executable, os.path.join(ROOT, "bench", "torch_peer.py"),
                                      model, "--threads", str(args.threads), "--steps",
                                      str(args.steps)])
            peer = json.loads(peer_out.strip().splitlines()[-1])
            runs.append({"trainer": float(m.group(2)), "trainer_ms": float(m.group(1)),
                         "overhead": float(o.group(1)) if o else None,
                         "pytorch": peer["samples_per_s"], "pytorch_ms": peer["step_ms"],
                         "trainer_rss": trainer_rss, "pytorch_rss": peer_rss, "peer": peer["peer"]})

        def median(key):
            values = [r[key] for r in runs if r[key] is not None]
            return statistics.median(values) if values else None

        r = {"model": model, "threads": args.threads, "batch": 128, "repeat": len(runs),
             "trainer_samples_per_s": median("trainer"), "trainer_step_ms": median("trainer_ms"),
             "trainer_overhead_pct": median("overhead"),
             "pytorch_samples_per_s": median("pytorch"), "pytorch_step_ms": median("pytorch_ms"),
             "ratio": statistics.median(x["trainer"] / x["pytorch"] for x in runs),
             "ratios": [x["trainer"] / x["pytorch"] for x in runs],
             "trainer_peak_rss_mib": max(x["trainer_rss"] for x in runs),
             "pytorch_peak_rss_mib": max(x["pytorch_rss"] for x in runs),
             "peer": runs[0]["peer"]}
        results.append(r)

    print(f"{'model':8} {'trainer samples/s':>18} {'pytorch samples/s':>18} {'ratio':>7} "
          f"{'trainer RSS MiB':>16} {'pytorch RSS MiB':>16}  per-run ratios")
    for r in results:
        print(f"{r['model']:8} {r['trainer_samples_per_s']:18.0f} {r['pytorch_samples_per_s']:18.0f} "
              f"{r['ratio']:6.2f}x {r['trainer_peak_rss_mib']:16.0f} {r['pytorch_peak_rss_mib']:16.0f}  "
              + " ".join(f"{x:.2f}" for x in r["ratios"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
