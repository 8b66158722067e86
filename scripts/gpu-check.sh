#!/usr/bin/env bash
# Runs THERE (the GPU machine), in one call of at most 8 minutes: finds the
# carried build (build-gpu/bundle from scripts/gpu-prepare.sh; builds it when
# cmake and nvcc exist and it is missing), points the loader at the bundle's
# libraries and at PyTorch's nvidia-* wheel libraries (cuDNN, cuBLAS, NCCL),
# runs `trainer doctor`, the GPU tests (with the 1-GPU NCCL collective) and the
# GPU benchmarks, and writes logs
# and results.json under $OUT (default ./gpu-check-out).
# Exit: 0 all passed; 1 something failed; 77 no GPU here (nothing was run on one).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/gpu-check-out}"
bundle="$root/build-gpu/bundle"
mkdir -p "$out"
started=$(date +%s)
log() { echo "[gpu-check $(($(date +%s) - started))s] $*" | tee -a "$out/gpu-check.log"; }
declare -A rc

write_results() {  # $1: overall status
  STATUS="$1" OUTDIR="$out" RCS="$(for k in "${!rc[@]}"; do echo "$k=${rc[$k]}"; done)" \
    python3 - <<'PY'
import json, os
out = os.environ["OUTDIR"]
def read(name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return None
r = {"status": os.environ["STATUS"],
     "exit_codes": dict(line.split("=", 1) for line in os.environ["RCS"].split("\n") if "=" in line),
     "doctor": read("doctor.txt")}
peer = read("torch_peer.json")
r["torch_peer"] = json.loads(peer) if peer else None
timings = {}
for name in sorted(os.listdir(out)):
    if name.startswith("trainer_time_") and name.endswith(".log"):
        timings[name[len("trainer_time_"):-4]] = (read(name) or "")[-2000:]
r["trainer_time"] = timings
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(r, f, indent=2)
print(json.dumps({k: r[k] for k in ("status", "exit_codes")}, indent=2))
PY
}

# 1. The build.
if [[ ! -x "$bundle/bin/trainer" ]]; then
  if command -v cmake >/dev/null && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
    log "no carried bundle: building it (scripts/gpu-prepare.sh)"
    JOBS=$(nproc) "$root/scripts/gpu-prepare.sh" >"$out/build.log" 2>&1 || { log "build failed (build.log)"; rc[build]=1; write_results "build failed"; exit 1; }
  else
    log "no carried build at $bundle and no cmake/nvcc to build one: run scripts/gpu-prepare.sh on the build machine and carry build-gpu/bundle"
    rc[build]=1; write_results "no build"; exit 1
  fi
fi
log "bundle from commit $(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)"

# 2. Libraries: the bundle's, then PyTorch's nvidia wheels.
wheel_libs=$(python3 - 2>/dev/null <<'PY'
import glob, os
dirs = []
try:
    import nvidia
    for base in nvidia.__path__:
        dirs += glob.glob(os.path.join(base, "*", "lib"))
except Exception:
    pass
print(":".join(sorted(set(dirs))))
PY
)
for d in /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
         /usr/local/lib/python3*/site-packages/nvidia/*/lib "$HOME"/.local/lib/python3*/site-packages/nvidia/*/lib; do
  [[ -d "$d" && ":$wheel_libs:" != *":$d:"* ]] && wheel_libs="$wheel_libs:$d"
done
export LD_LIBRARY_PATH="$bundle/lib:${wheel_libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "$LD_LIBRARY_PATH" | tr ':' '\n' >"$out/library_path.txt"
missing=$(ldd "$bundle"/bin/* 2>/dev/null | grep "not found" | sort -u)
[[ -n "$missing" ]] && log "libraries not found (see library_path.txt): $missing"
command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1

# 3. The doctor decides whether there is a GPU to check.
"$bundle/bin/trainer" doctor >"$out/doctor.txt" 2>&1
rc[doctor]=$?
cat "$out/doctor.txt"
if ! grep -q "^  GPU 0:" "$out/doctor.txt"; then
  reason=$(grep -m1 "status:.*\(no GPU\|BROKEN\)" "$out/doctor.txt" | sed -e 's/^ *status: *//' -e 's/^no GPU: //')
  log "no GPU: ${reason:-trainer doctor lists no GPU (exit ${rc[doctor]})}; GPU tests and benchmarks NOT run"
  write_results "no GPU: ${reason:-see doctor.txt}"
  exit 77
fi

# 4. GPU tests (run from the repository root, as ctest does).
cd "$root"
for t in test_gpu_vector_ops test_gpu_ops test_dist_nccl; do
  [[ $t == test_dist_nccl && ! -x "$bundle/bin/$t" ]] && { log "$t: not in the bundle (re-run gpu-prepare.sh)"; continue; }
  timeout "$([[ $t == test_dist_nccl ]] && echo 60 || echo 150)" "$bundle/bin/$t" >"$out/$t.log" 2>&1
  rc[$t]=$?
  log "$t: exit ${rc[$t]} ($(tail -n 2 "$out/$t.log" | tr '\n' ' '))"
done

# 4b. The memory plan against what a GPU run allocates (within 5%).
"$bundle/bin/trainer" plan configs/fashion_mnist_cnn.yaml "devices=[0]" >"$out/plan_cnn.txt" 2>&1
timeout 90 "$bundle/bin/trainer" run configs/fashion_mnist_cnn.yaml "devices=[0]" train.max_steps=20 \
  --out "$out/run_cnn" >"$out/run_cnn.log" 2>&1
PLAN="$out/plan_cnn.txt" SUMMARY="$out/run_cnn/summary.json" python3 - >"$out/plan_vs_run.txt" 2>&1 <<'PY'
import json, os, re, sys
text = open(os.environ["PLAN"]).read()
fig = lambda label: float(re.search(r"^  " + label + r"\s+([\d.]+) MiB", text, re.M).group(1))
predicted = fig("total") - fig("loader buffers")
peak = json.load(open(os.environ["SUMMARY"]))["memory_peak_mib"]
print(f"predicted {predicted:.2f} MiB, allocated {peak:.2f} MiB")
sys.exit(0 if abs(peak - predicted) <= 0.05 * peak else 1)
PY
rc[plan_vs_run]=$?
log "plan vs run on GPU: exit ${rc[plan_vs_run]} ($(cat "$out/plan_vs_run.txt" | tail -n 1))"

# 5. Benchmarks: the PyTorch peer, then the trainer on the same configs.
timeout 200 python3 "$root/bench/gpu/torch_peer.py" --out "$out/torch_peer.json" --steps 50 \
  >"$out/torch_peer.log" 2>&1
rc[torch_peer]=$?
log "torch peer: exit ${rc[torch_peer]}"
for cfg in mlp cnn resnet; do
  remaining=$((450 - ($(date +%s) - started)))
  ((remaining < 30)) && { log "time budget spent: trainer time $cfg skipped"; break; }
  timeout $((remaining < 60 ? remaining : 60)) "$bundle/bin/trainer" time \
    "configs/fashion_mnist_$cfg.yaml" "devices=[0]" >"$out/trainer_time_$cfg.log" 2>&1
  rc[trainer_time_$cfg]=$?
  log "trainer time $cfg: exit ${rc[trainer_time_$cfg]}"
done

status=passed
[[ ${rc[doctor]} == 0 && ${rc[test_gpu_ops]} == 0 && ${rc[test_gpu_vector_ops]} == 0 ]] || status=failed
[[ ${rc[test_dist_nccl]:-0} == 0 ]] || status=failed  # the 1-GPU NCCL path
[[ ${rc[plan_vs_run]} == 0 ]] || status=failed
write_results "$status"
log "done: $status (results.json in $out)"
[[ $status == passed ]]
