#!/usr/bin/env bash
# The cold-start sampling ablation trained to a plateau (docs/ablation_plateau.md: pre-registered
# design, power and plateau rule).  From the random tiny Qwen2-VL on `synth --size small-dense`
# (benchmark version 2: ID-Edit without the query's own source), recipes/ablation_dense.yaml:
#   naive_unmasked  the paper's baseline: naive interleaved batches, loss.identity_mask false
#   identity        identity-aware batches, loss mask on (the paper's method)
# Both arms train every seed of SEEDS: a pair shares the recipe seed, so the LoRA initialisation
# and the scheduler's random stream; the batches differ by design.  Compared paired by seed.
#
#   MODE=pilot JOBS=2 bash eval/ablation_plateau.sh   # ~25 min: one run per arm to PILOT_STEPS (seed
#                                                     # PILOT_SEED, not analysed), a checkpoint every
#                                                     # PILOT_EVERY steps evaluated -> RESULTS/pilot/
#   MODE=full  JOBS=2 bash eval/ablation_plateau.sh   # ~2.5 h: SEEDS x 2 arms at the plateau step
#
# STEPS: the arms' steps (default: `eval/ablation_plateau_table.py plateau-step` on the pilot: the
# pre-registered rule, held inside [600, 800]).  Writes OUT/<arm>-<seed>/{schedule.parquet,run,eval,
# log.txt}, RESULTS/<arm>_seed<N>.json (eval/study_results.py: schema 2, with strategy, hard
# negatives, recipe seed, benchmark version, provenance) and the results block of TABLE.
# Resumable: finished runs are kept, a run with a checkpoint resumes.  BATCH / INTERLEAVE shrink the
# batch (smoke tests only).  Smoke (numbers meaningless, ~2 min):
#   SIZE=tiny BATCH=8 INTERLEAVE=4 PILOT_STEPS=2 PILOT_EVERY=1 STEPS=2 SEEDS=0 OUT=/tmp/plateau \
#   RESULTS=/tmp/plateau/results TABLE=/tmp/plateau/t.md MODE=pilot bash eval/ablation_plateau.sh  (then MODE=full)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=eval/_study.sh
source eval/_study.sh  # VIS, PY, one thread; check_mode, batch_shape, ensure_*, evaluate, launch, ...
MODE=${MODE:-full}
SIZE=${SIZE:-small-dense}
OUT=${OUT:-ablation_plateau_out}
RESULTS=${RESULTS:-docs/results/ablation_plateau}
TABLE=${TABLE:-docs/ablation_plateau.md}
RECIPE=${RECIPE:-recipes/ablation_dense.yaml}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7 8 9"}
PILOT_SEED=${PILOT_SEED:-100}
PILOT_STEPS=${PILOT_STEPS:-1000}
PILOT_EVERY=${PILOT_EVERY:-100}
STEPS=${STEPS:-}
JOBS=${JOBS:-2}
BATCH=${BATCH:-}
INTERLEAVE=${INTERLEAVE:-}
check_mode
batch_shape
mkdir -p "$OUT" "$RESULTS"
ensure_benchmark
ensure_model

train() {  # variant, seed, steps, dir, extra --set arguments...
  local variant=$1 seed=$2 steps=$3 dir=$4 strategy=naive mask=false; shift 4
  [ "$variant" = identity ] && { strategy=identity_aware; mask=true; }
  [ -f "$dir/run/final/adapter_config.json" ] || $VIS train "$RECIPE" --resume \
    --set model="$OUT/model" --set data="$OUT/synth/train.yaml" --set schedule="$dir/schedule.parquet" \
    --set output_dir="$dir/run" --set seed="$seed" --set max_steps="$steps" \
    --set sampling.strategy="$strategy" --set sampling.hard_negatives=0 --set loss.identity_mask="$mask" \
    --set logging.tensorboard=false --set logging.progress_bar=false "${SHAPE[@]}" "$@"
}

pilot_one() {  # variant: PILOT_STEPS steps, every checkpoint evaluated and recorded
  local variant=$1 dir="$OUT/pilot/$1"
  mkdir -p "$dir"
  echo "== pilot: $variant, $PILOT_STEPS steps (log: $dir/log.txt)"
  (  # a subshell with `|| exit 1` after each step: `set -e` does not hold on the left of `||`
    train "$variant" "$PILOT_SEED" "$PILOT_STEPS" "$dir" --set checkpoint.every="$PILOT_EVERY" \
      --set checkpoint.keep_last=null || exit 1
    for adapter in "$dir"/run/checkpoint-* "$dir/run/final"; do
      step=${adapter##*checkpoint-}; [ "$adapter" = "$dir/run/final" ] && step=$PILOT_STEPS
      [ -f "$RESULTS/pilot/pilot-$variant-step${step}_seed$PILOT_SEED.json" ] && continue
      evaluate "$adapter" "$dir/eval-step$step" || exit 1
      $PY eval/study_results.py write --study ablation_plateau --arm "pilot-$variant-step$step" \
        --seed "$PILOT_SEED" --run-dir "$dir/run" --last-step "$step" --eval-dir "$dir/eval-step$step" \
        --schedule "$dir/schedule.parquet" --data "$OUT/synth/train.yaml" --out "$RESULTS/pilot" \
        --command "$COMMAND" > /dev/null || exit 1
    done
  ) > "$dir/log.txt" 2>&1 || { echo "!! pilot $variant failed: see $dir/log.txt" >&2; return 1; }
}

run_one() {  # variant, seed
  local variant=$1 seed=$2 dir="$OUT/$1-$2"
  [ -f "$RESULTS/${variant}_seed$seed.json" ] && return 0
  mkdir -p "$dir"
  echo "== $variant, seed $seed, $STEPS steps (log: $dir/log.txt)"
  {  # each step only after the one before succeeded (`set -e` does not hold on the left of `||`)
    train "$variant" "$seed" "$STEPS" "$dir" &&
    evaluate "$dir/run/final" "$dir/eval" &&
    $PY eval/study_results.py write --study ablation_plateau --arm "$variant" --seed "$seed" --run-dir "$dir/run" \
      --schedule "$dir/schedule.parquet" --data "$OUT/synth/train.yaml" --out "$RESULTS" --command "$COMMAND"
  } > "$dir/log.txt" 2>&1 || { echo "!! $variant, seed $seed failed: see $dir/log.txt" >&2; return 1; }
}

if [ "$MODE" = pilot ]; then
  COMMAND="MODE=pilot SIZE=$SIZE OUT=$OUT RESULTS=$RESULTS TABLE=$TABLE RECIPE=$RECIPE PILOT_SEED=$PILOT_SEED \
PILOT_STEPS=$PILOT_STEPS PILOT_EVERY=$PILOT_EVERY JOBS=$JOBS ${BATCH:+BATCH=$BATCH }${INTERLEAVE:+INTERLEAVE=$INTERLEAVE }\
bash eval/ablation_plateau.sh"
  for variant in naive_unmasked identity; do launch pilot_one "$variant"; done
else
  STEPS=${STEPS:-$($PY eval/ablation_plateau_table.py plateau-step --results "$RESULTS")}
  COMMAND="MODE=full SIZE=$SIZE OUT=$OUT RESULTS=$RESULTS TABLE=$TABLE RECIPE=$RECIPE STEPS=$STEPS \
SEEDS=\"$SEEDS\" JOBS=$JOBS ${BATCH:+BATCH=$BATCH }${INTERLEAVE:+INTERLEAVE=$INTERLEAVE }bash eval/ablation_plateau.sh"
  echo "== the arms train $STEPS steps"
  for seed in $SEEDS; do
    for variant in naive_unmasked identity; do launch run_one "$variant" "$seed"; done
  done
fi
wait_all

[ -f "$TABLE" ] || printf '# Plateau ablation (smoke)\n\n<!-- results -->\n<!-- /results -->\n' > "$TABLE"
$PY eval/ablation_plateau_table.py table --results "$RESULTS" --out "$TABLE" --recipe "$RECIPE" --command "$COMMAND"
