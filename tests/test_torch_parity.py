#!/usr/bin/env python3
"""PyTorch's side of test_torch_parity: writes a small classification set
(x.npy float32 [64, 8] for an MLP, or [64, 1, 8, 8] for a small CNN or
residual network, by CASE's first word; y.npy int64 [64]) and the model's initial state
(init.safetensors, named as the trainer names it: fc1.weight, bn.running_mean,
...) into DIR, trains the model on the set in order (batches of 16, no
shuffling) with the optimizer and schedule CASE names, and prints as JSON
the loss of every step, the momentum (SGD) or beta1 (Adam) its update used,
and the final state, tensor by tensor (flattened); with an average of the
weights (EMA_DECAY), also the averaged state and its loss on the whole set.

Usage: test_torch_parity.py DIR CASE STEPS
  CASE: sgd_onecycle_momentum | adam_onecycle_momentum | sgd_nesterov_cosine |
        adamw_linear | sgd_smoothing_step | cnn_sgd | residual_adamw_warmup |
        layernorm_adam | sgd_clip | frozen_first | frozen_last | adamw_groups | cnn_ema |
        cnn_ema_warmup
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def optimizer_and_schedule(case, params, steps):
    if case == "sgd_onecycle_momentum":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.0)
        return opt, torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=0.5, total_steps=steps, pct_start=0.3, cycle_momentum=True)
    if case == "adam_onecycle_momentum":
        opt = torch.optim.Adam(params, lr=0.01)
        return opt, torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=0.02, total_steps=steps, pct_start=0.25, cycle_momentum=True,
            base_momentum=0.8, max_momentum=0.9)
    if case == "sgd_nesterov_cosine":
        opt = torch.optim.SGD(params, lr=0.2, momentum=0.9, nesterov=True)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    if case == "adamw_linear":  # decay on every parameter: one parameter group
        opt = torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)
        return opt, torch.optim.lr_scheduler.LinearLR(
            opt, start_factor=1.0, end_factor=0.1, total_iters=steps)
    if case in ("cnn_sgd", "cnn_ema", "cnn_ema_warmup"):
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.001)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    if case == "sgd_smoothing_step":  # with LOSS_OPTIONS' label smoothing
        opt = torch.optim.SGD(params, lr=0.3, momentum=0.5, weight_decay=0.01)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    if case == "residual_adamw_warmup":  # warm-up, then cosine: the README's equivalence
        opt = torch.optim.AdamW(params, lr=0.02, weight_decay=0.01)
        warmup = 3
        return opt, torch.optim.lr_scheduler.SequentialLR(opt, [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, total_iters=warmup - 1),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - warmup)],
            milestones=[warmup])
    if case in FROZEN:
        opt = torch.optim.SGD(params, lr=0.2, momentum=0.9, weight_decay=0.01)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    if case == "adamw_groups":  # fc1 in a group of its own, a tenth of the rate
        net = params  # the MLP's modules, passed whole for this case
        opt = torch.optim.AdamW([{"params": net.fc1.parameters(), "lr": 0.001},
                                 {"params": net.fc2.parameters()}], lr=0.01, weight_decay=0.05)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    if case == "sgd_clip":  # with CLIP_NORM
        opt = torch.optim.SGD(params, lr=0.2, momentum=0.9)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    if case == "layernorm_adam":
        opt = torch.optim.Adam(params, lr=0.01, betas=(0.8, 0.99), eps=1e-6)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    raise SystemExit("unknown case " + case)


# Cross-entropy options by case (the default: none).
LOSS_OPTIONS = {"sgd_smoothing_step": {"label_smoothing": 0.1}}
# Gradient clipping by case: the largest global gradient norm.
CLIP_NORM = {"sgd_clip": 0.5}
# The decay of an exponential moving average of the weights, by case.
EMA_DECAY = {"cnn_ema": 0.8, "cnn_ema_warmup": 0.99}
# Averages warmed up as TensorFlow's ExponentialMovingAverage(num_updates):
# the decay of step t (from 0) is min(decay, (1 + t) / (10 + t)).
EMA_WARMUP = {"cnn_ema_warmup"}
# Frozen layers by case (requires_grad_(False)).
FROZEN = {"frozen_first": ["fc1"], "frozen_last": ["fc2"]}


def mlp_and_data(rng):
    """An 8-16-4 MLP (fc1, fc2) and x [64, 8] whose class raises one feature."""
    y = rng.integers(0, 4, size=64).astype(np.int64)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    x[np.arange(64), y] += 1.5
    net = torch.nn.Module()
    net.fc1, net.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    model = torch.nn.Sequential(net.fc1, torch.nn.ReLU(), net.fc2)
    return net, model, x, y


def cnn_and_data(rng):
    """conv 3x3 (4 channels) > batchnorm > relu > avgpool 3/2 pad 1 counting
    the padding > maxpool 2 > linear 4, on x [64, 1, 8, 8] whose class
    brightens one quadrant."""
    y = rng.integers(0, 4, size=64).astype(np.int64)
    x = rng.normal(size=(64, 1, 8, 8)).astype(np.float32)
    for i, label in enumerate(y):
        x[i, 0, 4 * (label // 2):4 * (label // 2) + 4, 4 * (label % 2):4 * (label % 2) + 4] += 1.0
    net = torch.nn.Module()
    net.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
    net.bn = torch.nn.BatchNorm2d(4)
    net.fc = torch.nn.Linear(16, 4)
    model = torch.nn.Sequential(
        net.conv, net.bn, torch.nn.ReLU(),
        torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), net.fc)
    return net, model, x, y


class Residual(torch.nn.Module):
    """stem conv > bn > relu, one residual block (conv1 > bn1 > relu > conv2 >
    bn2, plus its input, relu), global average pooling, linear 4."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(4)
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        y = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.fc(x.mean(dim=(2, 3)))


def residual_and_data(rng):
    net, _, x, y = cnn_and_data(rng)
    net = Residual()
    return net, net, x, y


def layernorm_mlp_and_data(rng):
    """fc1 > layernorm > gelu (erf) > fc2 > silu, concatenated with the
    input, > fc3 > tanh-form gelu > fc4, on the MLP's data."""
    _, _, x, y = mlp_and_data(rng)
    net = torch.nn.Module()
    net.fc1, net.ln = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16)
    net.fc2, net.fc3, net.fc4 = torch.nn.Linear(16, 8), torch.nn.Linear(16, 12), torch.nn.Linear(12, 4)

    class Model(torch.nn.Module):
        def forward(self, inputs):
            h = F.silu(net.fc2(F.gelu(net.ln(net.fc1(inputs)))))
            return net.fc4(F.gelu(net.fc3(torch.cat([h, inputs], dim=1)), approximate="tanh"))

    model = Model()
    model.net = net
    return net, model, x, y


MODELS = {"cnn": cnn_and_data, "residual": residual_and_data, "layernorm": layernorm_mlp_and_data}


def main():
    out, case, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    net, model, x, y = MODELS.get(case.split("_")[0], mlp_and_data)(rng)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), y)
    state = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    write_safetensors(os.path.join(out, "init.safetensors"), state)

    for name in FROZEN.get(case, []):
        getattr(net, name).requires_grad_(False)
    opt, schedule = optimizer_and_schedule(
        case, net if case == "adamw_groups" else model.parameters(), steps)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    # timm's ModelEmaV2: the averages start as the initial state and move
    # (1 - decay) of the way towards every tensor of it after each step.
    decay = EMA_DECAY.get(case)
    ema = {k: v.detach().clone() for k, v in state.items()} if decay else None
    losses, momenta = [], []
    for step in range(steps):
        group = opt.param_groups[0]
        momenta.append(group["betas"][0] if "betas" in group else group["momentum"])
        first = (step * 16) % 64
        loss = torch.nn.functional.cross_entropy(model(xs[first:first + 16]), ys[first:first + 16],
                                                 **LOSS_OPTIONS.get(case, {}))
        opt.zero_grad()
        loss.backward()
        if case in CLIP_NORM:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM[case])
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if ema:
            decay_t = min(decay, (1 + step) / (10 + step)) if case in EMA_WARMUP else decay
            with torch.no_grad():
                for k, v in ema.items():
                    v.add_((1 - decay_t) * (net.state_dict()[k] - v))
    final = {k: v.flatten().tolist() for k, v in net.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    result = {"losses": losses, "momenta": momenta, "final": final}
    if ema:  # the averaged state, and its loss over the whole set in evaluation mode
        result["ema"] = {k: v.flatten().tolist() for k, v in ema.items()}
        net.load_state_dict(ema, strict=False)
        model.eval()
        with torch.no_grad():
            result["ema_eval_loss"] = torch.nn.functional.cross_entropy(model(xs), ys).item()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
