# shellcheck shell=bash
# shellcheck disable=SC2154  # OUT, SIZE, MODE, JOBS, BATCH, INTERLEAVE are the sourcing driver's
# What the study drivers (eval/ablation_sampling.sh, ablation_warm.sh, ablation_plateau.sh,
# objectives_comparison.sh) share: sourced by each after it `cd`s to the repository root and
# sets its own variables; every function reads the driver's OUT, SIZE, MODE, JOBS, BATCH and
# INTERLEAVE when it is called.  Each function is one rule, written once here.

# The tools (the repository's virtual environment unless set) and one BLAS/OpenMP thread per
# process: JOBS=N runs N trainings at once, and a second thread per training would only make
# them fight over the cores (the recipes set torch_threads: 1 for the same reason).
VIS=${VIS:-.venv/bin/vis-embed}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# MODE is pilot or full; anything else stops the study before it starts (exit 2).
check_mode() {
  case $MODE in pilot|full) ;; *) echo "MODE must be pilot or full, got '$MODE'" >&2; exit 2 ;; esac
}

# Every given name is one of the allowed ones, else exit 2 naming it: fail before hours of
# training, not in the middle.  check_names NOUN "ALLOWED NAMES" NAME...
check_names() {
  local noun=$1 allowed=$2 name; shift 2
  for name in "$@"; do
    [[ " $allowed " == *" $name "* ]] || { echo "unknown $noun '$name' ($allowed)" >&2; exit 2; }
  done
}

# SHAPE: the --set arguments of BATCH (global_batch_size) and INTERLEAVE
# (sampling.interleave_batch_size), none when unset; they shrink the batch for smoke tests only.
batch_shape() {
  SHAPE=()
  if [ -n "$BATCH" ]; then SHAPE+=(--set global_batch_size="$BATCH"); fi
  if [ -n "$INTERLEAVE" ]; then SHAPE+=(--set sampling.interleave_batch_size="$INTERLEAVE"); fi
}

# OUT/synth: the synthetic benchmark of SIZE.  An older benchmark version is re-rendered, never
# evaluated under the new one's name (docs/synth.md).
ensure_benchmark() {
  $PY -c 'import sys; from vis_embed.prep.synth import is_current; sys.exit(not is_current(sys.argv[1]))' "$OUT/synth" \
    || $VIS synth "$OUT/synth" --seed 0 --size "$SIZE"
}

# OUT/model: the tiny random Qwen2-VL every study trains from (seed 0: the same for every run).
ensure_model() {
  [ -f "$OUT/model/config.json" ] || $VIS tiny-model "$OUT/model" --arch qwen2-vl --seed 0
}

# Every training is started with `vis-embed train --resume`: it continues the newest checkpoint,
# restarts from step 0 a run killed before its first one (its recipe.yaml is compared, not
# refused), and starts a run that never began -- one flag for all three, no rule to get wrong.

# One evaluation of the model (with ADAPTER; "" for the untrained model) on BENCHMARK (default
# the synthetic one) into EVAL_DIR, skipped when EVAL_DIR/results.json exists (a finished
# evaluation is kept).  evaluate ADAPTER EVAL_DIR [BENCHMARK]
evaluate() {
  local with_adapter=()
  if [ -n "$1" ]; then with_adapter=(--adapter "$1"); fi
  [ -f "$2/results.json" ] || $VIS eval --model "$OUT/model" "${with_adapter[@]}" \
    --benchmark "${3:-$OUT/synth/benchmark.yaml}" --out "$2" --no-pictures --quiet
}

# The job pool: `launch COMMAND...` runs COMMAND in the background once fewer than JOBS run;
# `wait_all` waits for the rest.  A failed run sets `failed` and the others go on; wait_all then
# exits 1 (the finished runs are kept, so rerunning the driver resumes the failed ones).
failed=0
launch() {
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || failed=1; done
  "$@" &
}
wait_all() {
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
  [ "$failed" = 0 ] || { echo "some runs failed; rerun the script to resume them" >&2; exit 1; }
}
