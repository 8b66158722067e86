#!/usr/bin/env bash
# Runs THERE (the GPU machine), in one call of at most 8 minutes: finds the
# carried build (build-gpu/carry/bundle.tar.xz from scripts/gpu-prepare.sh, or
# an unpacked build-gpu/bundle; builds it when cmake and nvcc exist and both
# are missing), points the loader at the bundle's libraries and at PyTorch's
# nvidia-* wheel libraries (cuDNN, cuBLAS, NCCL), runs `trainer doctor`, the
# GPU tests (with the 1-GPU NCCL collective), the memory plan against the GPU
# allocation, one fp16 and one bf16 epoch of the MLP (loss scaling on the
# device; the bf16 weight copies), the CNN
# config trained to the end on the GPU against its CPU accuracy, then in the
# time left the GPU benchmarks next to PyTorch and (for information) two GPU
# tests under compute-sanitizer's memcheck. Every
# stage runs under a timeout, and all of them within one deadline
# (GPU_CHECK_SECONDS, 450 s). GPU_CHECK_STAGES picks stages for a shorter
# call after a fix (default: all of "tests plan mixed cnn bench memcheck"; the
# doctor always runs). Logs are written to a temporary folder; at exit
# $OUT (default ./gpu-check-out) gets three files: results.json, gpu-check.log
# and logs.tar.gz with every log (a GPU machine returns only a few files).
# They are refreshed there after every stage too, so a call killed from
# outside still returns what had run (results.json's status then names the
# last stage done): give the call 30 s more than GPU_CHECK_SECONDS.
# Fashion-MNIST comes from the carry when the machine has no
# /usr/share/datasets copy. The carried bundle replaces one left by an earlier
# call.
# Exit: 0 all passed (a check skipped for lack of time is named in the status);
# 1 something failed, or the bundle does not run, or trainer doctor calls the
# CUDA setup BROKEN, or nvidia-smi lists a GPU that the trainer does not see;
# 77 no GPU here (nothing was run on one).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py_ld="${LD_LIBRARY_PATH:-}"  # python3 (torch) keeps its own libraries, not the bundle's
final="${OUT:-$root/gpu-check-out}"  # gets at most 8 files back: results.json, gpu-check.log, logs.tar.gz
out=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")  # every log; packed into $final on exit
bundle="$root/build-gpu/bundle"
mkdir -p "$final"
: "${HOME:=/root}"
started=$(date +%s)
deadline=$((started + ${GPU_CHECK_SECONDS:-450}))
# save: what has been written so far into $final (a call killed from outside
# returns that); pack: the same at exit, then the temporary folder goes.
save() {
  cp -f "$out/results.json" "$out/gpu-check.log" "$final/" 2>/dev/null
  tar -C "$out" --exclude=checkpoints -czf "$final/logs.tar.gz.part" . 2>/dev/null &&
    mv -f "$final/logs.tar.gz.part" "$final/logs.tar.gz"
}
pack() { save && rm -rf "$out"; }
trap pack EXIT
# A stage's command runs in the background (capped), so that a signal stops
# the script at once, not when the stage ends; it is stopped too.
# The trap waits for it (timeout's own 10 s kill bounds that), so that what
# it writes under $out is there when the results are packed.
trap 'log "stopped by a signal"
      [[ -n ${capped_pid:-} ]] && { kill "$capped_pid" 2>/dev/null; wait "$capped_pid"; }
      write_results "interrupted"; exit 1' TERM INT
# capped CAP CMD...: CMD under `timeout -k 10`, at most CAP seconds and never past the deadline.
# Not started when under 10 s are left: exit $not_started, which the status
# names as not run (a check that started and ran out of time, 124, failed).
not_started=200
capped() {
  local cap=$1 left=$((deadline - $(date +%s)))
  shift
  ((left < cap)) && cap=$left
  ((cap >= 10)) || { echo "skipped: the time budget is spent"; return $not_started; }
  timeout -k 10 "$cap" "$@" &
  capped_pid=$!
  wait "$capped_pid"
  local status=$?
  capped_pid=
  return $status
}
# not_run_if CHECK RC...: a check whose command(s) exited RC is not made when
# one of them was not started.
not_run_if() {
  local check=$1 code
  shift
  for code; do [[ $code == "$not_started" ]] && rc[$check]=$not_started; done
  return 0
}
py() { LD_LIBRARY_PATH="$py_ld" python3 "$@"; }
json_string() {  # $1 as a JSON string
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "${s//$'\n'/\\n}"
}
log() { echo "[gpu-check $(($(date +%s) - started))s] $*" | tee -a "$out/gpu-check.log"; }
declare -A rc
stages=" ${GPU_CHECK_STAGES:-tests plan mixed cnn bench memcheck} "
stages=${stages// fp16 / mixed }  # the stage's earlier name
stages=${stages// bf16 / mixed }
wanted() { [[ $stages == *" $1 "* ]]; }
unknown=""
for stage in $stages; do
  [[ " tests plan mixed cnn bench memcheck " == *" $stage "* ]] || unknown="$unknown $stage"
done
if [[ -n $unknown ]]; then  # a check asked for that would not run: the status fails
  log "GPU_CHECK_STAGES names no such stage:$unknown (the stages: tests plan mixed cnn bench memcheck)"
  rc[stages]=1
fi

write_results() {  # $1: overall status; a second argument "quiet": print nothing
  local rcs
  rcs="$(for k in "${!rc[@]}"; do echo "$k=${rc[$k]}"; done)"
  rm -f "$out/results.json"
  STATUS="$1" STAGES="$stages" OUTDIR="$out" RCS="$rcs" QUIET="${2:-}" py "$root/bench/gpu/gpu_results.py"
  if [[ ! -s $out/results.json ]]; then  # no python3, or it failed: the status and exit codes
    {
      printf '{"status": %s, "stages": %s, "written_by": "bash: python3 failed", "exit_codes": {' \
        "$(json_string "$1")" "$(json_string "$stages")"
      local k sep=""
      for k in "${!rc[@]}"; do printf '%s%s: %s' "$sep" "$(json_string "$k")" "$(json_string "${rc[$k]}")"; sep=", "; done
      printf '}, "doctor": %s}\n' "$(json_string "$(cat "$out/doctor.txt" 2>/dev/null)")"
    } >"$out/results.json"
    [[ -n ${2:-} ]] || cat "$out/results.json"
  fi
}
# After each stage: results.json as it stands (its status names the stage) and
# the logs, into $final.
stage_done() {
  write_results "running: stopped after stage $1" quiet
  save
}

# 1. The build.
carry="$root/build-gpu/carry"
if [[ -f "$carry/bundle.tar.xz" ]]; then  # the carry wins over a bundle left by an earlier call
  # tar -J needs the xz program, which a minimal image may lack: Python's lzma then.
  unpacked=0
  rm -rf "$bundle" && mkdir -p "$bundle" && tar -C "$bundle" -xJf "$carry/bundle.tar.xz" 2>"$out/unpack.log" && unpacked=1
  if ((!unpacked)); then
    rm -rf "$bundle" && mkdir -p "$bundle" &&
      BUNDLE="$bundle" CARRY="$carry/bundle.tar.xz" py -c \
        'import os, tarfile; tarfile.open(os.environ["CARRY"], "r:xz").extractall(os.environ["BUNDLE"])' \
        >>"$out/unpack.log" 2>&1 && unpacked=1
  fi
  ((unpacked)) || { log "cannot unpack $carry/bundle.tar.xz (unpack.log)"; rc[build]=1; write_results "bad carry"; exit 1; }
fi
if [[ ! -x "$bundle/bin/trainer" ]]; then
  if command -v cmake >/dev/null && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
    log "no carried bundle: building it (scripts/gpu-prepare.sh)"
    JOBS=$(nproc) "$root/scripts/gpu-prepare.sh" >"$out/build.log" 2>&1 || { log "build failed (build.log)"; rc[build]=1; write_results "build failed"; exit 1; }
  else
    log "no carried build at $carry or $bundle and no cmake/nvcc to build one: run scripts/gpu-prepare.sh on the build machine and carry build-gpu/carry"
    rc[build]=1; write_results "no build"; exit 1
  fi
fi
cat "$bundle/COMMIT" >"$out/bundle_commit.txt" 2>/dev/null || echo unknown >"$out/bundle_commit.txt"
log "bundle from commit $(cat "$out/bundle_commit.txt")"

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
         /usr/local/lib/python3*/site-packages/nvidia/*/lib "$HOME"/.local/lib/python3*/site-packages/nvidia/*/lib \
         /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib; do
  [[ -d "$d" && ":$wheel_libs:" != *":$d:"* ]] && wheel_libs="$wheel_libs:$d"
done
# The driver's libcuda where a container mounts it, last (the loader's own search first).
driver_libs=""
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [[ -d $d ]] && driver_libs="$driver_libs:$d"
done
# No empty entry: one would search the current directory.
library_path="$bundle/lib:${wheel_libs#:}:${LD_LIBRARY_PATH:-}$driver_libs"
while [[ $library_path == *::* ]]; do library_path="${library_path//::/:}"; done
export LD_LIBRARY_PATH="${library_path%:}"
echo "$LD_LIBRARY_PATH" | tr ':' '\n' >"$out/library_path.txt"
# The wheels' versions: which cuDNN, cuBLAS and NCCL the trainer loads here.
py -m pip list 2>/dev/null | grep -iE "^(nvidia-|torch )" >"$out/wheels.txt"
# Carried libraries built against a newer C library than this machine's
# (libstdc++ from glibc 2.36 on a 2.35 machine would stop every binary
# loading): the machine's own copy instead where it has one (every Python has
# libstdc++ and libgcc_s); any other is named, with what to do.
host_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
newer() { [[ $1 != "$2" && $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1) == "$1" ]]; }
if [[ -n $host_glibc && -f $bundle/GLIBC_NEEDS ]]; then
  while read -r need file; do
    newer "$need" "$host_glibc" || continue
    name=${file##*/}
    own=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n && $NF ~ /^\// {print $NF; exit}')
    for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      [[ -z $own && -e $d/$name ]] && own=$d/$name
    done
    if [[ $file == lib/* && -n $own ]]; then
      mkdir -p "$bundle/lib.newer-glibc" && mv "$bundle/$file" "$bundle/lib.newer-glibc/"
      log "carried $file needs glibc $need, this machine has $host_glibc: using its own $own"
    else
      log "carried $file needs glibc $need, this machine has $host_glibc and no $name of its own: the bundle cannot load here; build it (scripts/gpu-prepare.sh) on a system with glibc $host_glibc or older"
    fi
  done <"$bundle/GLIBC_NEEDS"
fi
missing=$(ldd "$bundle"/bin/* 2>/dev/null | grep "not found" | sort -u)
if [[ -n "$missing" ]]; then
  log "libraries not found (see library_path.txt): $missing"
  # cuBLAS 13, cuDNN 9 and NCCL 2 come from PyTorch's wheels: a PyTorch built for
  # another CUDA brings other majors.
  [[ $missing == *libcublas* || $missing == *libcudnn* || $missing == *libnccl* ]] &&
    log "PyTorch here is built for CUDA $(py -c 'import torch; print(torch.version.cuda)' 2>/dev/null || echo '(none found)'); the bundle needs the CUDA 13 wheels (nvidia-cublas, nvidia-cudnn-cu13, nvidia-nccl-cu13)"
fi
gpus_seen=0  # GPUs nvidia-smi lists
if command -v nvidia-smi >/dev/null; then
  LD_LIBRARY_PATH="$py_ld" timeout 30 nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  gpus_seen=$(LD_LIBRARY_PATH="$py_ld" timeout 30 nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
fi
driver=$(LD_LIBRARY_PATH="$py_ld" timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
log "this machine: glibc ${host_glibc:-unknown}, driver ${driver:-(none from nvidia-smi)}, $gpus_seen GPU(s) listed by nvidia-smi"

# The dataset every config reads, from the carry when this machine lacks it.
data=/usr/share/datasets/fashion-mnist
[[ -f $data/train-images-idx3-ubyte.gz ]] || data="$carry/fashion-mnist"
fmnist=("data.train.images=$data/train-images-idx3-ubyte.gz" "data.train.labels=$data/train-labels-idx1-ubyte.gz"
        "data.eval.images=$data/t10k-images-idx3-ubyte.gz" "data.eval.labels=$data/t10k-labels-idx1-ubyte.gz")

# 3. The doctor decides whether there is a GPU to check.
capped 60 "$bundle/bin/trainer" doctor >"$out/doctor.txt" 2>&1
rc[doctor]=$?
cat "$out/doctor.txt"
trainer_runs=1
if ((rc[doctor] >= 124)) || grep -q "error while loading shared libraries\|not found (required by" "$out/doctor.txt"; then
  log "the bundle's trainer does not run here (doctor exit ${rc[doctor]}): doctor.txt, library_path.txt"
  # The GPU tests load fewer libraries (no MPI): with a GPU listed, they run
  # anyway, and the stages that need the trainer do not; the status fails.
  if ((gpus_seen > 0)) && wanted tests; then
    log "nvidia-smi lists $gpus_seen GPU(s): running the GPU tests alone"
    rc[doctor]=1 trainer_runs=0 stages=" tests "
  else
    write_results "bundle does not run"; exit 1
  fi
fi
if ((trainer_runs)) && ! grep -q "^  GPU 0:" "$out/doctor.txt"; then
  reason=$(grep -m1 "status:.*\(no GPU\|BROKEN\)" "$out/doctor.txt" | sed -e 's/^ *status: *//' -e 's/^no GPU: //')
  reason=${reason:-trainer doctor lists no GPU (exit ${rc[doctor]})}
  if [[ $reason == BROKEN* ]] || ((gpus_seen > 0)); then  # a GPU is here: our setup fails to use it
    log "trainer doctor: $reason (nvidia-smi lists $gpus_seen GPU(s)); GPU tests and benchmarks NOT run: doctor.txt, library_path.txt, nvidia-smi.txt"
    write_results "broken: $reason (nvidia-smi lists $gpus_seen GPU(s))"
    exit 1
  fi
  log "no GPU: $reason; GPU tests and benchmarks NOT run"
  write_results "no GPU: $reason"
  exit 77
fi
stage_done doctor

# 4. GPU tests (run from the repository root, as ctest does), with cuBLASLt's
# and cuDNN's own error logs in theirs: a refused call says why there (and
# NCCL what it set up, or why it could not).
cd "$root" || { log "cannot cd to $root"; write_results "cannot cd to $root"; exit 1; }
# The tests labelled gpu, as gpu-prepare.sh listed them (a bundle without the
# list: every test binary it holds).
gpu_tests=$(cat "$bundle/GPU_TESTS" 2>/dev/null || (cd "$bundle/bin" && ls test_* 2>/dev/null))
gpu_tests=$(echo $gpu_tests)
# The resume test (six trainer processes, each loading cuDNN and cuBLASLt)
# last: the checks of single steps come first when time is short.
if [[ " $gpu_tests " == *" test_gpu_resume "* ]]; then
  gpu_tests=$(echo ${gpu_tests//test_gpu_resume/} test_gpu_resume)
fi
if [[ -z $gpu_tests ]] && wanted tests; then
  log "the bundle lists no GPU test (its GPU_TESTS): re-run gpu-prepare.sh"
  rc[gpu_tests]=1
fi
wanted tests && for t in $gpu_tests; do
  [[ ! -x "$bundle/bin/$t" ]] && { log "$t: not in the bundle (re-run gpu-prepare.sh)"; rc[$t]=missing; continue; }
  TRAINER_TEST_BINARY="$bundle/bin/trainer" \
    CUBLASLT_LOG_LEVEL=1 CUDNN_LOGLEVEL_DBG=1 CUDNN_LOGDEST_DBG=stderr NCCL_DEBUG=INFO \
    capped "$(case $t in test_dist_nccl | test_gpu_devices) echo 60 ;; test_gpu_resume) echo 180 ;; *) echo 120 ;; esac)" \
    "$bundle/bin/$t" --durations yes >"$out/$t.log" 2>&1
  rc[$t]=$?
  log "$t: exit ${rc[$t]} ($(tail -n 2 "$out/$t.log" | tr '\n' ' '))"
  stage_done "$t"
done

# 4b. The memory plan against what a GPU run allocates (within 5%).
if wanted plan; then
# Without autotuning: each process would time the algorithms anew and could
# pick others, with other workspaces, than the plan's process did.
capped 60 "$bundle/bin/trainer" plan configs/fashion_mnist_cnn.yaml "devices=[0]" "${fmnist[@]}" \
  backend.autotune=false >"$out/plan_cnn.txt" 2>&1
rc[plan_cnn]=$?
capped 90 "$bundle/bin/trainer" run configs/fashion_mnist_cnn.yaml "devices=[0]" "${fmnist[@]}" train.max_steps=20 \
  backend.autotune=false --out "$out/run_cnn" >"$out/run_cnn.log" 2>&1
rc[run_cnn]=$?
PLAN="$out/plan_cnn.txt" SUMMARY="$out/run_cnn/summary.json" py - >"$out/plan_vs_run.txt" 2>&1 <<'PY'
import json, os, re, sys
text = open(os.environ["PLAN"]).read()
fig = lambda label: float(re.search(r"^  " + label + r"\s+([\d.]+) MiB", text, re.M).group(1))
# The loader rings are pinned host memory, not device allocations.
host = fig("loader buffers") + (fig("eval loader buffers") if "eval loader buffers" in text else 0)
predicted = fig("total") - host
peak = json.load(open(os.environ["SUMMARY"]))["memory_peak_mib"]
print(f"predicted {predicted:.2f} MiB, allocated {peak:.2f} MiB")
sys.exit(0 if abs(peak - predicted) <= 0.05 * peak else 1)
PY
rc[plan_vs_run]=$?
not_run_if plan_vs_run "${rc[plan_cnn]}" "${rc[run_cnn]}"
log "plan vs run on GPU: exit ${rc[plan_vs_run]} ($(tail -n 1 "$out/plan_vs_run.txt"))"
# The run's last checkpoint, loaded onto the GPU by `trainer eval`, evaluates
# like the run's own final evaluation (autotuning may pick other algorithms
# in the new process: within 1e-4 relative).
capped 60 "$bundle/bin/trainer" eval "$out/run_cnn" --json >"$out/eval_cnn.json" 2>"$out/eval_cnn.log"
rc[eval_cnn]=$?
EVAL="$out/eval_cnn.json" SUMMARY="$out/run_cnn/summary.json" py - >"$out/gpu_eval.txt" 2>&1 <<'PY'
import json, os, sys
run = json.load(open(os.environ["SUMMARY"]))["final_eval"]
again = json.loads(open(os.environ["EVAL"]).read())
print(f"trainer eval: loss {again['loss']:.6f} accuracy {again['accuracy']:.4f}; "
      f"the run: loss {run['loss']:.6f} accuracy {run['accuracy']:.4f}")
ok = abs(again["loss"] - run["loss"]) <= 1e-4 * abs(run["loss"]) and \
     abs(again["accuracy"] - run["accuracy"]) <= 1e-3
sys.exit(0 if ok else 1)
PY
rc[gpu_eval]=$?
not_run_if gpu_eval "${rc[run_cnn]}" "${rc[eval_cnn]}"
log "trainer eval on GPU: exit ${rc[gpu_eval]} ($(tail -n 1 "$out/gpu_eval.txt"))"
stage_done plan
fi

# 4c. Mixed precision: one epoch of the MLP on the GPU in fp16 (dynamic loss
# scaling decided inside the update) and in bf16 (the layers read the bf16
# weight copies the update writes) reaches the CPU's float32 accuracy after
# one epoch (0.8635, `trainer run configs/fashion_mnist_mlp.yaml
# train.epochs=1`) within one point, with every step replayed from its
# recording.
if wanted mixed; then
for precision in fp16 bf16; do
capped 90 "$bundle/bin/trainer" run configs/fashion_mnist_mlp.yaml "devices=[0]" "${fmnist[@]}" \
  precision=$precision train.epochs=1 --out "$out/run_mlp_$precision" >"$out/run_mlp_$precision.log" 2>&1
rc[mlp_${precision}_run]=$?
PRECISION=$precision SUMMARY="$out/run_mlp_$precision/summary.json" \
  MANIFEST="$out/run_mlp_$precision/manifest.json" py - >"$out/mlp_$precision.txt" 2>&1 <<'PY'
import json, os, sys
cpu = 0.8635
s = json.load(open(os.environ["SUMMARY"]))
m = json.load(open(os.environ["MANIFEST"]))
gpu = s["final_eval"]["accuracy"]
print(f"{os.environ['PRECISION']} GPU {gpu:.4f} vs fp32 CPU {cpu:.4f}; loss scale "
      f"{s.get('loss_scale')}, {s.get('skipped_steps')} steps skipped, steps "
      f"{s.get('step_execution')} (manifest: {m.get('step_execution')}), "
      f"{s['mean_samples_per_s']:.0f} samples/s")
# Recorded, and said so in both records (the manifest's is written after the loop ends).
recorded = s.get("step_execution") == "recorded" and m.get("step_execution") == "recorded"
sys.exit(0 if abs(gpu - cpu) <= 0.01 and recorded else 1)
PY
rc[mlp_$precision]=$?
not_run_if "mlp_$precision" "${rc[mlp_${precision}_run]}"
log "$precision MLP on GPU: run exit ${rc[mlp_${precision}_run]}, check exit ${rc[mlp_$precision]} ($(tail -n 1 "$out/mlp_$precision.txt"))"
done
stage_done mixed
fi

# 5. End to end: the CNN config trained to the end on the GPU reaches the
# accuracy of the same config on the CPU (README: 0.9281 after 15 epochs,
# `trainer run configs/fashion_mnist_cnn.yaml`), within one point. A check,
# so it runs before the benchmarks (figures), within 150 s; a run that did
# not finish is not compared.
if wanted cnn; then
limit=$((deadline - $(date +%s)))
((limit > 150)) && limit=150
if ((limit < 60)); then
  log "time budget spent: the CNN run to the end is skipped"
  rc[cnn_full_run]=skipped
  rc[cnn_accuracy]=skipped
else
  capped "$limit" "$bundle/bin/trainer" run configs/fashion_mnist_cnn.yaml "devices=[0]" "${fmnist[@]}" \
    data.workers=6 --out "$out/run_cnn_full" >"$out/run_cnn_full.log" 2>&1
  rc[cnn_full_run]=$?
fi
[[ ${rc[cnn_accuracy]:-} == skipped ]] || {
SUMMARY="$out/run_cnn_full/summary.json" MANIFEST="$out/run_cnn_full/manifest.json" py - \
  >"$out/cnn_accuracy.txt" 2>&1 <<'PY'
import json, os, sys
cpu, epochs = 0.9281, 15
if not os.path.exists(os.environ["SUMMARY"]):  # killed before it could write one
    print("the run left no summary.json; not compared")
    sys.exit(2)
summary = json.load(open(os.environ["SUMMARY"]))
manifest = json.load(open(os.environ["MANIFEST"]))
if summary.get("status") != "complete" or summary.get("epochs") != epochs:
    print(f"the run did not finish: status {summary.get('status')}, {summary.get('epochs')} of "
          f"{epochs} epochs in {summary.get('wall_seconds', 0):.1f} s; not compared")
    sys.exit(2)
gpu = summary["final_eval"]["accuracy"]
print(f"GPU {gpu:.4f} vs CPU {cpu:.4f} in {summary['wall_seconds']:.1f} s "
      f"({summary['mean_samples_per_s']:.0f} samples/s, data wait {summary['data_wait_pct']:.1f}%), "
      f"steps {manifest.get('step_execution')}")
sys.exit(0 if abs(gpu - cpu) <= 0.01 else 1)
PY
rc[cnn_accuracy]=$?
# Stopped by its time limit: not compared, and named as such.
((rc[cnn_accuracy] == 2)) && [[ ${rc[cnn_full_run]} == 124 || ${rc[cnn_full_run]} == 137 ]] &&
  rc[cnn_accuracy]=unfinished
log "CNN to the end on GPU: run exit ${rc[cnn_full_run]}, accuracy check exit ${rc[cnn_accuracy]} ($(tail -n 1 "$out/cnn_accuracy.txt"))"
}
stage_done cnn
fi

# 6. Benchmarks: the PyTorch peer, then the trainer on the same configs, in
# the time left but for 40 s kept for memcheck.
if wanted bench; then
capped 150 env LD_LIBRARY_PATH="$py_ld" python3 "$root/bench/gpu/torch_peer.py" --out "$out/torch_peer.json" --steps 50 \
  >"$out/torch_peer.log" 2>&1
rc[torch_peer]=$?
log "torch peer: exit ${rc[torch_peer]}"
stage_done torch_peer
time_config() {  # $1: name for the log, then the config and its overrides
  local name=$1
  shift
  local remaining=$((deadline - 40 - $(date +%s)))
  ((remaining < 30)) && { log "time budget spent: trainer time $name skipped"; return; }
  capped $((remaining < 60 ? remaining : 60)) "$bundle/bin/trainer" time "$@" "devices=[0]" \
    >"$out/trainer_time_$name.log" 2>&1
  rc[trainer_time_$name]=$?
  log "trainer time $name: exit ${rc[trainer_time_$name]} ($(grep -m1 'whole step' "$out/trainer_time_$name.log"))"
  stage_done "trainer_time_$name"
}
for precision in fp32 bf16 tf32; do
  for cfg in mlp cnn resnet; do
    time_config "${cfg}_$precision" "configs/fashion_mnist_$cfg.yaml" "${fmnist[@]}" \
      "precision=$precision" --steps 50
  done
done
time_config large_mlp_bf16 bench/gpu/large_mlp.yaml --steps 10
# The same with its relus as layers of their own: what the GEMM epilogue saves.
time_config large_mlp_bf16_unfused bench/gpu/large_mlp.yaml backend.fuse_activations=false \
  --steps 10
fi

# 7. In the time left, for information (not part of the status): the vector
# ops and the recorded steps under compute-sanitizer's memcheck (out-of-bounds
# and misaligned accesses, API errors). Some machines refuse the sanitizer.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [[ -n "$sanitizer" ]] && wanted memcheck; then
  for t in test_gpu_vector_ops test_gpu_step_graph; do
    # The sanitizer runs with the machine's libraries; only the test gets the bundle's.
    capped 60 env LD_LIBRARY_PATH="$py_ld" "$sanitizer" --tool memcheck --error-exitcode 9 \
      --target-processes all env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" "$bundle/bin/$t" \
      >"$out/memcheck_$t.log" 2>&1
    rc[memcheck_$t]=$?
    log "memcheck $t: exit ${rc[memcheck_$t]} ($(grep -m1 "ERROR SUMMARY" "$out/memcheck_$t.log"))"
    stage_done "memcheck_$t"
    # No summary of its own: the sanitizer itself did not run the test through
    # (a machine that refuses it, or the cap); the next would fail alike. A
    # test that fails under it (exit 1) still has its summary.
    if ! grep -q "ERROR SUMMARY" "$out/memcheck_$t.log"; then
      log "memcheck: stopped after $t (the sanitizer did not run it through; see memcheck_$t.log)"
      break
    fi
  done
fi

# The status: every check of the stages that ran passed (the benchmarks and
# memcheck are figures, not checks); a check left out for lack of time, or a
# test missing from the bundle, is named.
status=passed
not_run=""
for check in stages doctor gpu_tests $gpu_tests plan_vs_run gpu_eval mlp_fp16 mlp_bf16 cnn_accuracy; do
  case ${rc[$check]:-} in
    "" | 0) ;;
    skipped | missing | unfinished) not_run="$not_run $check (${rc[$check]})" ;;
    $not_started) not_run="$not_run $check (skipped: the time budget was spent)" ;;
    *) status=failed ;;
  esac
done
[[ -n $not_run ]] && status="$status (what ran); not run:$not_run"
write_results "$status"
log "done: $status (results.json, logs.tar.gz in $final)"
[[ $status == passed* ]]
