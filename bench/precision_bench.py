#!/usr/bin/env python3
"""bf16 against float32, trainer and PyTorch side by side in one run.

For each model the four runs alternate --repeat times: `trainer time` with
precision fp32 and bf16, and bench/torch_peer.py with fp32 and bf16 autocast,
all on the same thread count and a fixed batch of 128 (compute only). Reports
the medians, the bf16/fp32 speed-up of each side and trainer bf16 against
PyTorch bf16. Run from the repository root after building:

    /usr/bin/python3 bench/precision_bench.py [--models mlp cnn] [--threads 2] [--steps 30] [--repeat 3]
"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench import ROOT, run  # noqa: E402


def trainer_rate(trainer, model, threads, steps, precision):
    config = os.path.join(ROOT, "configs", f"fashion_mnist_{model}.yaml")
    out, _ = run([trainer, "time", config, f"backend.threads={threads}", "data.workers=0",
                  f"precision={precision}", "--steps", str(steps)])
    return float(re.search(r"whole step [\d.]+ ms \(([\d.]+) samples/s\)", out).group(1))


def pytorch_rate(model, threads, steps, precision):
    out, _ = run([sys.executable, os.path.join(ROOT, "bench", "torch_peer.py"), model,
                  "--threads", str(threads), "--steps", str(steps), "--precision", precision])
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()

    results = []
    for model in args.models:
        runs = []
        for _ in range(max(1, args.repeat)):
            runs.append({
                "trainer_fp32": trainer_rate(args.trainer, model, args.threads, args.steps, "fp32"),
                "trainer_bf16": trainer_rate(args.trainer, model, args.threads, args.steps, "bf16"),
                "pytorch_fp32": pytorch_rate(model, args.threads, args.steps, "fp32"),
                "pytorch_bf16": pytorch_rate(model, args.threads, args.steps, "bf16"),
            })
        r = {"model": model, "threads": args.threads, "batch": 128, "repeat": len(runs)}
        for key in runs[0]:
            r[key] = statistics.median(x[key] for x in runs)
        r["trainer_bf16_speedup"] = statistics.median(x["trainer_bf16"] / x["trainer_fp32"]
                                                      for x in runs)
        r["pytorch_bf16_speedup"] = statistics.median(x["pytorch_bf16"] / x["pytorch_fp32"]
                                                      for x in runs)
        r["bf16_ratio_vs_pytorch"] = statistics.median(x["trainer_bf16"] / x["pytorch_bf16"]
                                                       for x in runs)
        results.append(r)

    print(f"{'model':7} {'trainer fp32':>13} {'trainer bf16':>13} {'speed-up':>9} "
          f"{'pytorch fp32':>13} {'pytorch bf16':>13} {'speed-up':>9} {'bf16 vs pytorch':>16}")
    for r in results:
        print(f"{r['model']:7} {r['trainer_fp32']:13.0f} {r['trainer_bf16']:13.0f} "
              f"{r['trainer_bf16_speedup']:8.2f}x {r['pytorch_fp32']:13.0f} {r['pytorch_bf16']:13.0f} "
              f"{r['pytorch_bf16_speedup']:8.2f}x {r['bf16_ratio_vs_pytorch']:15.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
