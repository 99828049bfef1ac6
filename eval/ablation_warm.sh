#!/usr/bin/env bash
# The warm-start false-negative study (issue 30; docs/experiments.md): do false negatives hurt
# once a model already pulls an identity's views together, and at the paper's tau?
#
#   1. probe   a few steps of the base recipe + one evaluation, timed: the planned total is
#              printed, and the script stops when it exceeds BUDGET_HOURS (FORCE=1 goes on)
#   2. base    recipes/ablation_dense.yaml identity-aware from the random tiny model for
#              BASE_STEPS, a checkpoint every BASE_EVERY; each is evaluated and the one with
#              the highest held-out ID-Rec is THE warm start of every arm (RESULTS/base/)
#   3. pilot   (MODE=pilot) from EVERY base checkpoint: naive_unmasked and naive_masked, seed 0,
#              PILOT_STEPS steps, each tau: where the false-negative share starts to matter
#              (RESULTS/pilot/)
#   4. arms    (MODE=full) from the chosen checkpoint, STEPS steps of recipes/ablation_warm.yaml:
#              naive_unmasked  naive interleaved batches, loss mask off (the paper's baseline)
#              naive_masked    the same batches (same seed -> same schedule), mask on
#              identity        identity-aware batches, mask on
#              seeds SEEDS_PAIR (>= 10) for the two naive arms, SEEDS_OTHER (>= 5) for identity,
#              each at every tau of TAUS (0.02 learnable when LEARN_002=true, else fixed; 0.07 fixed)
#   5. table   eval/ablation_warm_table.py -> TABLE, from the result files RESULTS/**.json only
#
#   MODE=pilot bash eval/ablation_warm.sh      # base + pilot (run first; read RESULTS/pilot)
#   MODE=full  bash eval/ablation_warm.sh      # base (kept) + the arms + the table
# Resumable: a run with a result file is skipped, a run with a checkpoint resumes.  JOBS=N
# runs N trainings at once (one torch thread each).  Toy smoke test (a couple of minutes):
#   SIZE=tiny BATCH=8 INTERLEAVE=4 BASE_STEPS=4 BASE_EVERY=2 STEPS=2 PILOT_STEPS=2 PROBE_STEPS=2 \
#   SEEDS_PAIR="0 1" SEEDS_OTHER=0 OUT=/tmp/warm RESULTS=/tmp/warm/results TABLE=/tmp/warm/t.md \
#   MODE=full bash eval/ablation_warm.sh
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
# shellcheck source=eval/_study.sh
source eval/_study.sh  # VIS, PY, one thread; check_mode, batch_shape, ensure_*, evaluate, launch, ...
MODE=${MODE:-pilot}
SIZE=${SIZE:-small-dense}
OUT=${OUT:-ablation_warm_out}
BASE_RECIPE=${BASE_RECIPE:-recipes/ablation_dense.yaml}
RECIPE=${RECIPE:-recipes/ablation_warm.yaml}
RESULTS=${RESULTS:-docs/results/ablation_warm}
TABLE=${TABLE:-docs/ablation_warm.md}
BASE_STEPS=${BASE_STEPS:-800}
BASE_EVERY=${BASE_EVERY:-200}
BASE_SEED=${BASE_SEED:-1000}     # the base run's schedule and init: not one of the arms' seeds
STEPS=${STEPS:-200}
PILOT_STEPS=${PILOT_STEPS:-100}
PROBE_STEPS=${PROBE_STEPS:-6}
SEEDS_PAIR=${SEEDS_PAIR:-"0 1 2 3 4 5 6 7 8 9"}
SEEDS_OTHER=${SEEDS_OTHER:-"0 1 2 3 4"}
TAUS=${TAUS:-"0.02 0.07"}
LEARN_002=${LEARN_002:-true}     # the paper's learnable tau from 0.02; false if the pilot diverges
BATCH=${BATCH:-}                 # toy runs only: global_batch_size / interleave_batch_size overrides
INTERLEAVE=${INTERLEAVE:-}
JOBS=${JOBS:-1}
BUDGET_HOURS=${BUDGET_HOURS:-6}
# every folder spelled out: the printed command never writes into another study's folders
COMMAND="MODE=$MODE SIZE=$SIZE OUT=$OUT RESULTS=$RESULTS TABLE=$TABLE BASE_STEPS=$BASE_STEPS BASE_EVERY=$BASE_EVERY STEPS=$STEPS PILOT_STEPS=$PILOT_STEPS \
SEEDS_PAIR=\"$SEEDS_PAIR\" SEEDS_OTHER=\"$SEEDS_OTHER\" TAUS=\"$TAUS\" LEARN_002=$LEARN_002 JOBS=$JOBS \
${BATCH:+BATCH=$BATCH }${INTERLEAVE:+INTERLEAVE=$INTERLEAVE }bash eval/ablation_warm.sh"
check_mode
batch_shape
mkdir -p "$OUT" "$RESULTS"
ensure_benchmark
ensure_model

absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# ---------------------------------------------------------------- 1. probe + plan
probe=$OUT/probe
if [ ! -f "$probe/eval/results.json" ]; then
  mkdir -p "$probe"
  echo "== probe: $PROBE_STEPS steps + one evaluation, timed"
  started=$(date +%s)
  $VIS train "$BASE_RECIPE" --overwrite --set model="$OUT/model" --set data="$OUT/synth/train.yaml" \
    --set schedule="$probe/schedule.parquet" --set output_dir="$probe/run" --set max_steps="$PROBE_STEPS" \
    --set checkpoint.every=0 --set logging.tensorboard=false --set logging.progress_bar=false \
    "${SHAPE[@]}" > "$probe/log.txt" 2>&1 || { echo "!! probe failed: $probe/log.txt" >&2; exit 1; }
  echo $(( $(date +%s) - started )) > "$probe/train_seconds"
  started=$(date +%s)
  evaluate "$probe/run/final" "$probe/eval" >> "$probe/log.txt" 2>&1
  echo $(( $(date +%s) - started )) > "$probe/eval_seconds"
fi
read -r -a pair_seeds <<< "$SEEDS_PAIR"; read -r -a other_seeds <<< "$SEEDS_OTHER"; read -r -a taus <<< "$TAUS"
checkpoints=$(( BASE_STEPS / BASE_EVERY ))  # evaluated base adapters (checkpoint-N ..., final/)
[ "$(( BASE_STEPS % BASE_EVERY ))" = 0 ] || checkpoints=$(( checkpoints + 1 ))
base_left=$BASE_STEPS; [ -f "$OUT/base/run/final/adapter_config.json" ] && base_left=0
$PY eval/ablation_warm_table.py plan --probe "$probe" --jobs "$JOBS" --budget-hours "$BUDGET_HOURS" \
  --base-steps "$base_left" --base-evals "$checkpoints" \
  --runs "$([ "$MODE" = pilot ] && echo $(( checkpoints * 2 * ${#taus[@]} )) \
            || echo $(( (2 * ${#pair_seeds[@]} + ${#other_seeds[@]}) * ${#taus[@]} )))" \
  --steps "$([ "$MODE" = pilot ] && echo "$PILOT_STEPS" || echo "$STEPS")" \
  || [ "${FORCE:-0}" = 1 ] || { echo "over budget: reduce steps/seeds or FORCE=1" >&2; exit 3; }

# ---------------------------------------------------------------- 2. base
base=$OUT/base
if [ ! -f "$base/run/final/adapter_config.json" ]; then
  echo "== base: $BASE_STEPS identity-aware steps (log: $base/log.txt)"
  mkdir -p "$base"
  $VIS train "$BASE_RECIPE" --resume --set model="$OUT/model" --set data="$OUT/synth/train.yaml" \
    --set schedule="$base/schedule.parquet" --set output_dir="$base/run" --set seed="$BASE_SEED" \
    --set max_steps="$BASE_STEPS" --set checkpoint.every="$BASE_EVERY" --set checkpoint.keep_last=null \
    --set sampling.strategy=identity_aware --set logging.tensorboard=false --set logging.progress_bar=false \
    "${SHAPE[@]}" > "$base/log.txt" 2>&1 || { echo "!! base failed: $base/log.txt" >&2; exit 1; }
fi
for adapter in "$base"/run/checkpoint-* "$base/run/final"; do
  step=${adapter##*checkpoint-}; [ "$adapter" = "$base/run/final" ] && step=$BASE_STEPS
  [ -f "$RESULTS/base/base-step${step}_seed$BASE_SEED.json" ] && continue
  evaluate "$adapter" "$base/eval-step$step" >> "$base/log.txt" 2>&1
  $PY eval/study_results.py write --study ablation_warm --arm "base-step$step" --seed "$BASE_SEED" --run-dir "$base/run" \
    --last-step "$step" \
    --eval-dir "$base/eval-step$step" --schedule "$base/schedule.parquet" --data "$OUT/synth/train.yaml" \
    --out "$RESULTS/base" --command "$COMMAND" > /dev/null
done
best_step=$($PY eval/ablation_warm_table.py best-base --results "$RESULTS")
best=$base/run/checkpoint-$best_step; [ "$best_step" = "$BASE_STEPS" ] && best=$base/run/final
echo "== warm start: $best (highest held-out ID-Rec of the base run)"

# ---------------------------------------------------------------- 3./4. the runs
run_one() {  # group (pilot|arms), arm variant, tau, seed, init adapter, steps, arm name
  local group=$1 variant=$2 tau=$3 seed=$4 init=$5 steps=$6 arm=$7 strategy=naive mask=true learnable=false
  case $variant in naive_unmasked) mask=false ;; identity) strategy=identity_aware ;; esac
  [ "$tau" = 0.02 ] && learnable=$LEARN_002
  local dir="$OUT/$group/$arm-$seed" results="$RESULTS"
  [ "$group" = pilot ] && results="$RESULTS/pilot"
  [ -f "$results/${arm}_seed$seed.json" ] && return 0
  mkdir -p "$dir"
  echo "== $group: $arm, seed $seed (log: $dir/log.txt)"
  {  # each step only after the one before succeeded (`set -e` does not hold on the left of `||`)
    { [ -f "$dir/run/final/adapter_config.json" ] || $VIS train "$RECIPE" --resume \
      --set model="$OUT/model" --set data="$OUT/synth/train.yaml" --set init_adapter="$init" \
      --set schedule="$dir/schedule.parquet" --set output_dir="$dir/run" --set seed="$seed" \
      --set max_steps="$steps" --set sampling.strategy="$strategy" --set loss.identity_mask="$mask" \
      --set temperature.init="$tau" --set temperature.learnable="$learnable" \
      --set logging.progress_bar=false "${SHAPE[@]}"; } &&
    evaluate "$dir/run/final" "$dir/eval" &&
    $PY eval/study_results.py write --study ablation_warm --arm "$arm" --seed "$seed" --run-dir "$dir/run" \
      --schedule "$dir/schedule.parquet" --data "$OUT/synth/train.yaml" --out "$results" --command "$COMMAND"
  } > "$dir/log.txt" 2>&1 || { echo "!! $arm, seed $seed failed: see $dir/log.txt" >&2; return 1; }
}

if [ "$MODE" = pilot ]; then
  for adapter in "$base"/run/checkpoint-* "$base/run/final"; do
    step=${adapter##*checkpoint-}; [ "$adapter" = "$base/run/final" ] && step=$BASE_STEPS
    for tau in "${taus[@]}"; do
      for variant in naive_unmasked naive_masked; do
        launch run_one pilot "$variant" "$tau" 0 "$(absolute "$adapter")" "$PILOT_STEPS" "from$step-$variant-tau$tau"
      done
    done
  done
else
  for seed in "${pair_seeds[@]}"; do
    for tau in "${taus[@]}"; do
      for variant in naive_unmasked naive_masked; do
        launch run_one arms "$variant" "$tau" "$seed" "$(absolute "$best")" "$STEPS" "$variant-tau$tau"
      done
      if [[ " ${other_seeds[*]} " == *" $seed "* ]]; then
        launch run_one arms identity "$tau" "$seed" "$(absolute "$best")" "$STEPS" "identity-tau$tau"
      fi
    done
  done
  for seed in "${other_seeds[@]}"; do  # identity seeds outside SEEDS_PAIR
    [[ " ${pair_seeds[*]} " == *" $seed "* ]] && continue
    for tau in "${taus[@]}"; do
      launch run_one arms identity "$tau" "$seed" "$(absolute "$best")" "$STEPS" "identity-tau$tau"
    done
  done
fi
wait_all

# ---------------------------------------------------------------- 5. the table
$PY eval/ablation_warm_table.py table --results "$RESULTS" --out "$TABLE" --recipe "$RECIPE" \
  --base-recipe "$BASE_RECIPE" --command "$COMMAND"
