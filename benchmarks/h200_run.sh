#!/usr/bin/env bash
# How the H200 figures were made: one device call per step, from the repository root.
# Wheels carried in git-ignored folders: .whl (deepspeed, its pure-Python deps, liger-kernel, datasets + dill +
# multiprocess: the trainer's data path needs datasets, which the GPU image lacks),
# .whl-ui (gradio and the deps the GPU image lacks). $OUT is where results go.
#   bash benchmarks/h200_run.sh speedups        # gpu_speedups.py, then gpu_ui_check.py
#   bash benchmarks/h200_run.sh matrix CONFIGS [TIMEOUT_S] [REPEATS]  # gpu_matrix.py for a comma list of configs
#   (GROW_GIB=48 by default: host memory touched first, see gpu_matrix.grow_host_memory)
#   bash benchmarks/h200_run.sh plan22 [DEADLINE_S]  # issue 22: step components, layer probes, held-out set 4,
#                                                   # then the --fit grids until DEADLINE_S (default 560) from the start
#   bash benchmarks/h200_run.sh confirm5 [DEADLINE_S] # issue 22: the confirmation set (and grid settings still missing)
#   bash benchmarks/h200_run.sh grid GRIDS [DEADLINE_S]  # issue 22: the --fit grids GRIDS (a comma list of
#                                                   # benchmarks/heldout_sets.py GRIDS), rows not yet in
#                                                   # benchmarks/results/fit_grid.json, in order, until DEADLINE_S
#                                                   # (default 270) from the start; $OUT/fit_grid.json holds them all
#                                                   # (and the rows of a grid run before it in the same call)
#   bash benchmarks/h200_run.sh speed36 PART [DEADLINE_S]  # issue 36: one part of gpu_speed.py's matrix (issue36: the
#                                                   # issue's rows by priority, one call; lora, full, trials-lora,
#                                                   # trials-full: `python3 benchmarks/gpu_speed.py --list`),
#                                                   # every row twice in ABBA order, the bare script in the same call,
#                                                   # merged into a copy of benchmarks/results/h200_speed.json;
#                                                   # ROWS=a,b: only these rows of the part (what a cut call left out)
#   bash benchmarks/h200_run.sh chat [REPS]           # issue 24: chat_speed.py (the worker against bare generate)
#   (issue 26's speed26 and rows26 calls ran gpu_speed.py as it was before issue 36: see git history)
#   TINY=1 PY=.venv/bin/python OUT=/tmp/out W=/tmp/zb-dry bash benchmarks/h200_run.sh speed36 issue36 420  # on CPU, tiny
#   (W: the bench's work folder, /tmp/zb-matrix unless set)
#   bash benchmarks/h200_run.sh heldout5 [DEADLINE_S]  # issue 34: the fifth held-out set's measured columns (rows not
#                                                   # yet measured), merged into $OUT/planner_heldout5.json
#   bash benchmarks/h200_run.sh fitprobe SETUPS [DEADLINE_S]  # issue 34: fit_probe.py for a comma list of its SETUPS,
#                                                   # keeping what benchmarks/results/fit_probe.json measured before
#   bash benchmarks/h200_run.sh multi CONFIGS [TIMEOUT_S]  # nvidia-h200-x2: the UI check with ranks on GPUs 1,0
#                                                         # (ZeRO-2), then gpu_matrix.py --gpus 2 for CONFIGS
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -n "${PY:-}" ]; then  # another interpreter as python3 (a dry run on CPU with the project's venv)
  mkdir -p /tmp/zb-py && printf '#!/bin/sh\nexec %s "$@"\n' "$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" >/tmp/zb-py/python3
  chmod +x /tmp/zb-py/python3 && PATH=/tmp/zb-py:$PATH
fi
smi() { command -v nvidia-smi >/dev/null && nvidia-smi "$@"; }
TINY=${TINY:+--tiny}
export PYTHONPATH=/tmp/site:$PWD/app PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
if [ -z "$TINY" ]; then
  for w in ${WHL:-.whl} .whl-ui; do
    [ -d "$w" ] && python3 benchmarks/install_wheels.py "$w" --target /tmp/site >>"$OUT/install_wheels.log" 2>&1
  done
fi
python3 -c "import deepspeed, liger_kernel; print('deepspeed', deepspeed.__version__)" 2>&1 | tail -1
smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
W=${W:-/tmp/zb-matrix}
T0=$(date +%s)
left() { echo $(( ${1:-560} - $(date +%s) + T0 )); }
case "$1" in
  speed36)
    # the image lacks these (issue 26's first call lost every row to a missing `datasets`): fail fast
    python3 -c "import datasets, deepspeed, peft, transformers" || { echo "missing packages"; exit 3; }
    [ -z "$TINY" ] && { python3 -c "import liger_kernel, triton" || { echo "missing packages"; exit 3; }; }
    [ -f benchmarks/results/h200_speed.json ] && cp benchmarks/results/h200_speed.json "$OUT/h200_speed.json"
    python3 benchmarks/gpu_matrix.py --prepare-only --out /tmp/unused.json --workdir $W $TINY >"$OUT/setup.log" 2>&1
    echo "prepared at $(( $(date +%s) - T0 )) s"
    timeout "$(left "$3")" python3 benchmarks/gpu_speed.py --part "$2" ${ROWS:+--rows "$ROWS"} --out "$OUT/h200_speed.json" \
      --workdir $W $TINY \
      --deadline-s "$(( $(left "$3") - 30 ))" >"$OUT/speed.log" 2>&1
    echo "speed36 $2 rc=$? at $(( $(date +%s) - T0 )) s"; tail -n 24 "$OUT/speed.log" ;;
  plan22)
    python3 -m zeroboard.cli build-ops --op CPUAdamBuilder >/tmp/build_ops.log 2>&1 &
    timeout 60 python3 benchmarks/step_components.py --out "$OUT/step_components.json" 2>&1 >/dev/null | tail -n 3
    echo "components rc=$?"
    for c in "16x1024 --padded --cases tinyllama-1.1b:lora:pure16,tinyllama-1.1b:lora:autocast" \
             "1x8192 --cases ministral-3b:full:pure16,smollm3-3b:full:pure16"; do
      timeout 60 python3 benchmarks/planner_layer_probe.py --tokens $c --out "$OUT/layer_probe.json" 2>&1 | tail -n 4
    done
    wait; tail -n 3 /tmp/build_ops.log
    timeout 300 python3 benchmarks/planner_heldout.py --set heldout4 --out "$OUT/planner_heldout4.json" --budget-s 150 \
      --grace-s 60 --concurrency 5 --host-gib 110 --steps 4 --workdir /tmp/zb-heldout >"$OUT/heldout4.log" 2>&1
    echo "heldout4 rc=$?"; tail -n 20 "$OUT/heldout4.log"
    timeout "$(left "$2")" python3 benchmarks/fit_grid.py --out "$OUT/fit_grid.json" --budget-s "$(( $(left "$2") - 45 ))" \
      --steps 8 --row-timeout 45 --workdir /tmp/zb-heldout \
      --grids "starcoder-1b lora 4096 x4,phi-2 full 2048 x4,smollm3-3b full 2048 x8" >"$OUT/fit_grid.log" 2>&1
    echo "grid rc=$?"; tail -n 14 "$OUT/fit_grid.log" ;;
  confirm5)
    timeout "$(left "$2")" python3 benchmarks/planner_heldout.py --set confirm5 --out "$OUT/planner_confirm5.json" \
      --budget-s 90 --grace-s 45 --concurrency 6 --steps 3 --workdir /tmp/zb-heldout >"$OUT/confirm5.log" 2>&1
    echo "confirm5 rc=$?"; tail -n 12 "$OUT/confirm5.log" ;;
  grid)
    D=${3:-270} DONE=benchmarks/results/fit_grid.json
    [ -f "$OUT/fit_grid.json" ] && DONE=$OUT/fit_grid.json  # a grid run before in this call: keep its rows too
    timeout "$(left "$D")" python3 benchmarks/fit_grid.py --out "$OUT/fit_grid.json" \
      --skip-done "$DONE" --budget-s "$(( $(left "$D") - 75 ))" --steps 8 --row-timeout 75 \
      --workdir /tmp/zb-heldout --grids "$2" >"$OUT/fit_grid.log" 2>&1
    echo "grid rc=$?"; tail -n 14 "$OUT/fit_grid.log" ;;
  speedups)
    timeout 420 python3 benchmarks/gpu_speedups.py --out "$OUT/h200_speedups.json" --steps 20 --workdir $W ${2:+--only $2} \
      >"$OUT/speedups.log" 2>&1; echo "speedups rc=$?"; tail -n 14 "$OUT/speedups.log"
    timeout 170 python3 benchmarks/gpu_ui_check.py --model $W/model-1b --data $W/data-1024.json --workdir /tmp/zb-ui-work \
      --out "$OUT/ui_check.json" >"$OUT/ui_check.log" 2>&1; echo "ui_check rc=$?"
    grep -v '^UI_CHECK' "$OUT/ui_check.log" | tail -c 3000
    cp /tmp/zb-ui-work/server.log "$OUT/" 2>/dev/null ;;
  matrix)
    timeout "${3:-560}" python3 benchmarks/gpu_matrix.py --out "$OUT/h200.json" --configs "$2" --steps 20 --workdir $W \
      --repeats "${4:-1}" --grow-host-gib "${GROW_GIB:-48}" \
      >"$OUT/matrix.log" 2>&1; echo "matrix rc=$?"; tail -n 14 "$OUT/matrix.log" ;;
  heldout5)
    python3 -c "import datasets, deepspeed, liger_kernel, peft, transformers, triton" || { echo "missing packages"; exit 3; }
    export TORCH_CUDA_ARCH_LIST=9.0
    python3 -m zeroboard.cli build-ops --op CPUAdamBuilder >"$OUT/setup.log" 2>&1 &  # its offload rows; beside the models' build
    D=${2:-570}
    timeout "$(left "$D")" python3 benchmarks/heldout5.py --gpu --out "$OUT/heldout5_rows.json" --concurrency 4 \
      --budget-s "$(( $(left "$D") - 75 ))" --grace-s 45 --row-timeout 240 --host-gib 100 >"$OUT/heldout5.log" 2>&1
    echo "heldout5 rc=$? at $(( $(date +%s) - T0 )) s"; tail -n 24 "$OUT/heldout5.log"
    cp benchmarks/results/planner_heldout5.json "$OUT/" ;;
  fitprobe)
    python3 -c "import datasets, deepspeed, liger_kernel, peft, transformers, triton" || { echo "missing packages"; exit 3; }
    export TORCH_CUDA_ARCH_LIST=9.0
    D=${3:-570}
    timeout "$(left "$D")" python3 benchmarks/fit_probe.py --out "$OUT/fit_probe.json" --only "$2" \
      --skip-done benchmarks/results/fit_probe.json --budget-s "$(( $(left "$D") - 60 ))" --row-timeout 120 \
      >"$OUT/fit_probe.log" 2>&1
    echo "fit_probe rc=$? at $(( $(date +%s) - T0 )) s"; tail -n 12 "$OUT/fit_probe.log" ;;
  multi)
    python3 benchmarks/gpu_matrix.py --prepare-only --out "$OUT/h200-x2.json" --workdir $W >"$OUT/prepare.log" 2>&1
    echo "prepare rc=$?"; tail -n 2 "$OUT/prepare.log"
    timeout 100 python3 benchmarks/gpu_ui_check.py --model $W/model-1b --data $W/data-1024.json --workdir /tmp/zb-ui-work \
      --gpus 1,0 --stage 2 --budget 90 --out "$OUT/ui_check_x2.json" >"$OUT/ui_check_x2.log" 2>&1; echo "ui_check rc=$?"
    grep '^SUMMARY' "$OUT/ui_check_x2.log" | cut -c1-2500
    cp /tmp/zb-ui-work/server.log "$OUT/" 2>/dev/null
    timeout "${3:-150}" python3 benchmarks/gpu_matrix.py --gpus 2 --out "$OUT/h200-x2.json" --configs "$2" --steps 20 \
      --workdir $W >"$OUT/matrix_x2.log" 2>&1; echo "matrix rc=$?"; tail -n 6 "$OUT/matrix_x2.log" ;;
esac
smi --query-compute-apps=pid,used_memory --format=csv,noheader
true
