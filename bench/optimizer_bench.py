#!/usr/bin/env python3
"""Optimizer update time, trainer vs PyTorch, side by side in one run.

For each model (configs/fashion_mnist_{mlp,cnn}.yaml and its twin in
bench/torch_models.py: the same parameter tensors) both sides time one
optimizer update over every parameter, gradients already in place, on the
same number of threads. The trainer's figure is the "optimizer" line of
`trainer time`; PyTorch's is torch.optim.<Optimizer>.step(), the faster of
its per-tensor loop and its foreach implementation. The two sides alternate
--repeat times and the medians are reported. Run from the repository root
after building:

    /usr/bin/python3 bench/optimizer_bench.py [--models mlp cnn] [--optimizer adamw]
        [--threads 2] [--steps 200] [--repeat 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEIGHT_DECAY = 0.01
LR = 1e-4  # what `trainer time` updates with


def peer(model, optimizer, threads, steps):
    """PyTorch's update time in ms for the model's parameters (runs in its own process)."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import torch_models
    torch.set_num_threads(threads)
    best = None
    for foreach in (False, True):
        net = getattr(torch_models, model)()
        for p in net.parameters():
            p.grad = torch.randn_like(p)
        kind = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}
        kwargs = {"lr": LR, "weight_decay": WEIGHT_DECAY, "foreach": foreach}
        if optimizer == "sgd":
            kwargs["momentum"] = 0.9
        opt = kind[optimizer](net.parameters(), **kwargs)
        for _ in range(5):
            opt.step()
        start = time.perf_counter()
        for _ in range(steps):
            opt.step()
        ms = 1000 * (time.perf_counter() - start) / steps
        if best is None or ms < best[0]:
            best = (ms, "foreach" if foreach else "for-loop")
    params = sum(p.numel() for p in net.parameters())
    print(json.dumps({"ms": best[0], "impl": best[1], "params": params,
                      "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # internal: run the PyTorch side
    args = ap.parse_args()
    if args.peer:
        return peer(args.peer, args.optimizer, args.threads, args.steps)

    results = []
    for model in args.models:
        config = os.path.join(ROOT, "configs", f"fashion_mnist_{model}.yaml")
        runs = []
        for _ in range(max(1, args.repeat)):
            out = subprocess.run(
                [args.trainer, "time", config, f"backend.threads={args.threads}", "data.workers=0",
                 f"optimizer.type={args.optimizer}", f"optimizer.weight_decay={WEIGHT_DECAY}",
                 "optimizer.momentum=0.9", "--steps", str(args.steps)],
                check=True, capture_output=True, text=True).stdout
            m = re.search(r"optimizer \(\w+\) ([\d.]+) ms", out)
            p = json.loads(subprocess.run(
                [sys.executable, __file__, "--peer", model, "--optimizer", args.optimizer,
                 "--threads", str(args.threads), "--steps", str(args.steps)],
                check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            runs.append({"trainer_ms": float(m.group(1)), "pytorch_ms": p["ms"], "impl": p["impl"],
                         "params": p["params"], "torch": p["torch"]})
        r = {"model": model, "optimizer": args.optimizer, "threads": args.threads,
             "params": runs[0]["params"], "repeat": len(runs),
             "trainer_ms": statistics.median(x["trainer_ms"] for x in runs),
             "pytorch_ms": statistics.median(x["pytorch_ms"] for x in runs),
             "pytorch_impl": runs[0]["impl"], "torch": runs[0]["torch"],
             "ratios": [x["pytorch_ms"] / x["trainer_ms"] for x in runs]}
        r["ratio"] = statistics.median(r["ratios"])
        results.append(r)

    print(f"{'model':6} {'optimizer':9} {'params':>9} {'trainer ms':>11} {'pytorch ms':>11} "
          f"{'speed-up':>9}  per-run")
    for r in results:
        print(f"{r['model']:6} {r['optimizer']:9} {r['params']:9d} {r['trainer_ms']:11.3f} "
              f"{r['pytorch_ms']:11.3f} {r['ratio']:8.2f}x  "
              + " ".join(f"{x:.2f}" for x in r["ratios"]) + f"  (PyTorch {r['pytorch_impl']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
