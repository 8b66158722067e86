# The PyTorch peer of bench/loader/loader_bench.cpp: the same Fashion-MNIST
# pipeline (scale, normalize, random crop 28 with padding 4, random horizontal
# flip, batch 128, shuffle, drop_last) through torch.utils.data.DataLoader with
# the same worker counts. torchvision is not installed here, so the transforms
# are written with torch tensor ops in the Dataset, per sample, as torchvision
# would apply them. Prints `RESULT torch <workers> <samples/s>` per run
# (steady state: from the first batch to the end of the epoch).
# Run with /usr/bin/python3 (the interpreter that has torch).
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FashionMnist(Dataset):
    def __init__(self, root, padding=4, mean=0.2860, std=0.3530):
        self.images = torch.from_numpy(read_idx(f"{root}/train-images-idx3-ubyte.gz").copy())
        self.labels = torch.from_numpy(read_idx(f"{root}/train-labels-idx1-ubyte.gz").astype(np.int64))
        self.padding, self.mean, self.std = padding, mean, std

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float() / 255.0          # scale
        x = (x - self.mean) / self.std                           # normalize
        p = self.padding                                         # random crop with padding
        x = F.pad(x, (p, p, p, p))
        oy, ox = torch.randint(0, 2 * p + 1, (2,)).tolist()
        x = x[:, oy:oy + 28, ox:ox + 28]
        if torch.rand(1).item() < 0.5:                           # random horizontal flip
            x = torch.flip(x, dims=[2])
        return x, self.labels[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = FashionMnist(args.root)
    for workers in [int(w) for w in args.workers.split(",")]:
        loader = DataLoader(dataset, batch_size=128, shuffle=True, drop_last=True,
                            num_workers=workers, prefetch_factor=4, persistent_workers=True)
        samples, seconds = 0, 0.0
        for _ in range(args.epochs):
            it = iter(loader)
            next(it)
            begin = time.perf_counter()
            for x, y in it:
                samples += x.shape[0]
            seconds += time.perf_counter() - begin
        print(f"RESULT torch {workers} {samples / seconds:.0f}  "
              f"({samples} samples in {seconds:.3f} s; torch {torch.__version__})", flush=True)


if __name__ == "__main__":
    main()
