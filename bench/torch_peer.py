#!/usr/bin/env python3
"""PyTorch peer for the trainer benchmarks: the same models as configs/*.yaml,
the same batch, SGD with momentum, the same thread count. Prints one JSON line
with the training samples/s measured on a fixed in-memory batch (compute only),
and the process's peak RSS.

With --precision bf16 the forward runs under torch.autocast("cpu", bfloat16),
PyTorch's mixed precision on CPU (fp32 master weights, bf16 matmuls/convs).

Usage: bench/torch_peer.py {mlp,cnn,resnet} [--steps N] [--threads T] [--batch B]
                           [--precision fp32|bf16]
"""
import argparse
import json
import resource
import time

import torch
import torch.nn.functional as F

from torch_models import MODELS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=MODELS)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = MODELS[args.model]()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peer": "pytorch " + torch.__version__, "model": args.model,
                      "threads": torch.get_num_threads(), "batch": args.batch,
                      "precision": args.precision,
                      "step_ms": 1000 * elapsed / args.steps,
                      "samples_per_s": args.batch * args.steps / elapsed,
                      "peak_rss_mib": rss_mib}))


if __name__ == "__main__":
    main()
