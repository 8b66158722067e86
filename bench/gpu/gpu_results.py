#!/usr/bin/env python3
"""Writes results.json for scripts/gpu-check.sh from the logs in one folder.

Reads, in $OUTDIR: doctor.txt, torch_peer.json (bench/gpu/torch_peer.py), every
trainer_time_<model>_<precision>.log (`trainer time` output) and every other
stage's .log/.txt. Writes $OUTDIR/results.json with the status ($STATUS), the
stages ($STAGES, space separated), each stage's exit code ($RCS, lines of
name=code), the trainer's samples/s over PyTorch's per model and precision,
the large bf16 MLP's FLOP rate against the bf16 GEMM rate (its sizes from
torch_peer.json), and each log cut to what says why it failed. Prints the
headline figures unless $QUIET is set.
"""
import json
import os
import re

out = os.environ["OUTDIR"]


def read(name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return None


r = {"status": os.environ["STATUS"], "stages": os.environ["STAGES"].split(),
     "exit_codes": dict(line.split("=", 1) for line in os.environ["RCS"].split("\n") if "=" in line),
     "doctor": read("doctor.txt")}
peer = read("torch_peer.json")
try:
    r["torch_peer"] = json.loads(peer) if peer else None
except ValueError as e:
    r["torch_peer"] = {"unreadable": str(e)}
timings, ratios = {}, {}
peer = r["torch_peer"] or {}
large = peer.get("large_bf16_mlp") or {}
for name in sorted(os.listdir(out)):
    if not (name.startswith("trainer_time_") and name.endswith(".log")):
        continue
    key = name[len("trainer_time_"):-4]
    text = read(name) or ""
    step = re.search(r"whole step ([\d.]+) ms \((\d+) samples/s\)", text)
    ran = re.search(r"whole steps ran (.*)", text)
    entry = {"step_ms": float(step.group(1)) if step else None,
             "samples_per_s": float(step.group(2)) if step else None,
             "steps_ran": ran.group(1) if ran else None, "tail": text[-1500:]}
    timings[key] = entry
    model, precision = key.rsplit("_", 1)
    torch_rate = peer.get("train_samples_per_s", {}).get(f"{model}/{precision}")
    if step and torch_rate:
        ratios[key] = round(entry["samples_per_s"] / torch_rate, 3)
    if key == "large_mlp_bf16" and step and peer.get("bf16_gemm_tflops") and large.get("width"):
        # 3 GEMMs of width x width per layer per sample, 2 FLOPs each.
        tflops = 6.0 * large["width"] ** 2 * large["depth"] * entry["samples_per_s"] / 1e12
        r["large_bf16_mlp"] = {"trainer_tflops": round(tflops, 3),
                               "gemm_tflops": peer["bf16_gemm_tflops"],
                               "fraction_of_gemm_rate": round(tflops / peer["bf16_gemm_tflops"], 3),
                               "torch": large}
fused, unfused = timings.get("large_mlp_bf16"), timings.get("large_mlp_bf16_unfused")
if fused and unfused and fused["step_ms"] and unfused["step_ms"]:
    r["large_bf16_mlp_epilogue_speedup"] = round(unfused["step_ms"] / fused["step_ms"], 3)
r["trainer_time"] = timings
r["trainer_over_torch_samples_per_s"] = ratios
# Each stage's log, cut to what says why it failed: from a little before the
# first Catch2 failure (tests), and the end (the rest is in logs.tar.gz).
tails = {}
for name in sorted(os.listdir(out)):
    if name.startswith("trainer_time_") or name in ("doctor.txt", "gpu-check.log", "results.json") \
            or not name.endswith((".log", ".txt")):
        continue
    text = read(name) or ""
    first = text.find("FAILED:")
    if len(text) <= 8000:
        tails[name] = text
    else:
        head = text[max(0, first - 1500):first + 4500] + "\n[...]\n" if first >= 0 else ""
        tails[name] = head + text[-2500:]
r["log_tails"] = tails
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(r, f, indent=2)
if not os.environ.get("QUIET"):
    print(json.dumps({k: r.get(k) for k in ("status", "exit_codes", "trainer_over_torch_samples_per_s",
                                             "large_bf16_mlp", "large_bf16_mlp_epilogue_speedup")},
                     indent=2))
