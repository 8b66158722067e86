#!/usr/bin/env python3
"""PyTorch peer of the trainer's GPU benchmarks, run on the GPU machine.

Trains the models of configs/fashion_mnist_{mlp,cnn,resnet}.yaml (same layers,
batch size 128, SGD with momentum) on synthetic 1x28x28 data already on the
GPU, at fp32, tf32 and bf16 (autocast), with cudnn.benchmark on, and reports
training samples/s. Also measures the dense bf16 GEMM rate (torch.matmul on
large square matrices) and a large bf16 MLP's achieved FLOP rate against it.
Writes one JSON object (to --out, or stdout). Exits 77 when no GPU is usable.
`--device cpu --small` runs the same code on the CPU with small sizes: the
test suite's check of this script on machines without a GPU (its figures say
nothing about a GPU).
"""
import argparse
import json
import os
import sys
import time


# The optimizer and loss of each config (configs/fashion_mnist_*.yaml and
# bench/gpu/large_mlp.yaml), so both sides do the same work.
RECIPES = {
    "mlp": {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
    "cnn": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "resnet": {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4,
               "smoothing": 0.05},
    "large_mlp": {"lr": 0.01, "momentum": 0.9},
}


def set_tf32(torch, on):
    try:  # torch 2.9 and later (allow_tf32 is deprecated there)
        mode = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    except Exception:  # older torch raises on the unknown attribute
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def synchronize(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def train_rate(torch, dev, model, batch, precision, steps, warmup, in_shape, classes, recipe):
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=recipe["lr"], momentum=recipe["momentum"],
                          nesterov=recipe.get("nesterov", False),
                          weight_decay=recipe.get("weight_decay", 0.0))
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=recipe.get("smoothing", 0.0))
    x = torch.randn(batch, *in_shape, device=dev)
    y = torch.randint(0, classes, (batch,), device=dev)
    set_tf32(torch, precision == "tf32")

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    synchronize(torch, dev)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(torch, dev)
    return batch * steps / (time.perf_counter() - start)


def bf16_gemm_rate(torch, dev, n, reps):
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    synchronize(torch, dev)
    start = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    synchronize(torch, dev)
    return 2.0 * n ** 3 * reps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON here (default: stdout)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true",
                        help="a small large-MLP and GEMM (for --device cpu)")
    args = parser.parse_args()
    try:
        import torch
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from torch_models import MODELS
    except ImportError as e:
        print(f"no torch: {e}", file=sys.stderr)
        return 77
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is false", file=sys.stderr)
        return 77
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True

    def save(result):  # after every figure: a run stopped by its time limit keeps those it has
        if args.out:
            with open(args.out + ".part", "w") as f:
                f.write(json.dumps(result, indent=2) + "\n")
            os.replace(args.out + ".part", args.out)

    result = {"device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
              "torch": torch.__version__,
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "batch_size": 128, "train_samples_per_s": {}}
    for name, make in MODELS.items():
        for precision in ("fp32", "tf32", "bf16"):
            torch.manual_seed(1)
            rate = train_rate(torch, dev, make(), 128, precision, args.steps, args.warmup,
                              (1, 28, 28), 10, RECIPES[name])
            result["train_samples_per_s"][f"{name}/{precision}"] = round(rate, 1)
            print(f"{name:7s} {precision}: {rate:10.1f} samples/s", file=sys.stderr)
            save(result)
    gemm = bf16_gemm_rate(torch, dev, 512 if args.small else 8192, 3 if args.small else 20)
    result["bf16_gemm_tflops"] = round(gemm / 1e12, 3)
    save(result)
    # A large bf16 MLP: 4 layers of 8192 at batch 8192 with relus between them;
    # 3 GEMMs per layer per step.
    width, batch, depth = (256, 256, 4) if args.small else (8192, 8192, 4)
    layers = []
    for i in range(depth):
        layers.append(torch.nn.Linear(width, width))
        if i < depth - 1:
            layers.append(torch.nn.ReLU())
    big = torch.nn.Sequential(*layers)
    rate = train_rate(torch, dev, big, batch, "bf16", 10, args.warmup, (width,), width,
                      RECIPES["large_mlp"])
    flops = 6.0 * width * width * depth * rate
    result["large_bf16_mlp"] = {"width": width, "depth": depth, "batch": batch,
                                "samples_per_s": round(rate, 1), "tflops": round(flops / 1e12, 3),
                                "fraction_of_gemm_rate": round(flops / gemm, 3)}
    save(result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
