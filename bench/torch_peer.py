#!/usr/bin/env python3
"""PyTorch peer for the trainer benchmarks: the same models as configs/*.yaml,
the same batch, SGD with momentum, the same thread count. Prints one JSON line
with the training samples/s measured on a fixed in-memory batch (compute only),
and the process's peak RSS.

Usage: bench/torch_peer.py {mlp,cnn,resnet} [--steps N] [--threads T] [--batch B]
"""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Dropout(0.3), nn.Linear(256, 10))


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)


class Down(nn.Module):
    def __init__(self, cin, c):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.proj = nn.Conv2d(cin, c, 1, stride=2, bias=False)
        self.proj_bn = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + self.proj_bn(self.proj(x)))


def resnet():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        Residual(32), Residual(32), Down(32, 64), Residual(64), Down(64, 128), Residual(128),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


MODELS = {"mlp": mlp, "cnn": cnn, "resnet": resnet}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=MODELS)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
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
                      "step_ms": 1000 * elapsed / args.steps,
                      "samples_per_s": args.batch * args.steps / elapsed,
                      "peak_rss_mib": rss_mib}))


if __name__ == "__main__":
    main()
