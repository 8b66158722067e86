#!/usr/bin/env python3
"""Reads a trainer checkpoint's model.safetensors with a few lines of Python
(struct + json + torch.frombuffer; no safetensors package), loads it into the
equivalent PyTorch module from bench/torch_models.py, and evaluates the first
batches of the Fashion-MNIST test set as the trainer does (scale, normalize,
in order). Prints {"loss", "accuracy", "top5", "samples"} as JSON.

Usage: test_interop.py MODEL_SAFETENSORS IMAGES_GZ LABELS_GZ BATCHES BATCH_SIZE
"""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_models import MODELS  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    start = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = bytearray(data[start + begin:start + end])
        tensors[name] = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    weights, images_path, labels_path, batches, batch_size = sys.argv[1:6]
    n = int(batches) * int(batch_size)
    tensors = read_safetensors(weights)
    model = MODELS["cnn"]()
    # Sequential positions of the named layers in configs/fashion_mnist_cnn.yaml.
    layers = {"conv1": 0, "bn1": 1, "conv2": 4, "bn2": 5, "fc1": 9, "fc2": 12}
    state = {}
    for name, tensor in tensors.items():
        layer, field = name.split(".", 1)
        state[f"{layers[layer]}.{field}"] = tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit(f"weights do not match the torch module: missing {missing}, unexpected {unexpected}")
    model.eval()
    x = torch.from_numpy(read_idx(images_path)[:n].astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530
    y = torch.from_numpy(read_idx(labels_path)[:n].astype(np.int64))
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(1) == y).float().mean().item()
    top5 = (logits.topk(5, 1).indices == y[:, None]).any(1).float().mean().item()
    print(json.dumps({"loss": loss, "accuracy": accuracy, "top5": top5, "samples": n}))


if __name__ == "__main__":
    main()
