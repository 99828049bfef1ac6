#!/usr/bin/env bash
# The paper's sampling ablation (its Table 2) in miniature, on the synthetic benchmark:
# same tiny model, same data, same steps for every variant; VARIANTS x SEEDS training runs.
#   naive_unmasked  the paper's baseline: interleaved sub-batches (each slot of M members from one
#                   sub-dataset, rows drawn uniformly), no identity constraint, loss.identity_mask
#                   false -- another instance of the query's identity in the batch is a negative
#   naive_masked    the same schedule (same seed -> same batches), loss mask on
#   identity        identity-aware: each identity at most once per batch, p(identity) ∝ instances
#   identity_hn     identity-aware + k=HN structured hard negatives (look-alikes) in the anchor's slot
#   naive           older name of naive_masked (the first ablation's baseline)
# Every variant except naive_unmasked trains with the loss mask on (the recipe default).
# Writes OUT/<variant>-<seed>/{schedule.parquet,run,eval,log.txt}, one result file per run
# RESULTS/<variant>_seed<N>.json (metrics, final loss, schedule hash, provenance; committed,
# default docs/results/<TABLE stem>/) and the table TABLE, built from the result files only.
#
#   bash eval/ablation_sampling.sh                        # SIZE=small: docs/ablation.md
#   SIZE=small-dense JOBS=2 bash eval/ablation_sampling.sh   # docs/ablation_dense.md (30 runs)
#   SIZE=small-skewed bash eval/ablation_sampling.sh         # docs/ablation_skewed.md
# SIZE picks the data (`vis-embed synth --size SIZE`) and the defaults of OUT, RECIPE, TABLE,
# SEEDS, SEEDS_OTHER and HN; each can be set.  SEEDS: the seeds of the naive variants (the
# same-batch pairs, compared paired); SEEDS_OTHER: the seeds of identity / identity_hn (other
# batches, compared with Welch's interval; default SEEDS).  STEPS overrides the recipe's
# max_steps (smoke tests only: the table is then no study). JOBS=N runs N trainings at once, one torch thread each
# (OMP_NUM_THREADS=1; the recipes set torch_threads: 1): two fit a 2-core machine. The script is
# resumable: finished runs (eval/results.json) are kept, a run with a checkpoint resumes from it.
# Accuracy figures are deterministic (same seed -> same numbers whatever JOBS); timings are not.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=eval/_study.sh
source eval/_study.sh  # VIS, PY, one thread; check_names, ensure_*, evaluate, launch, wait_all, ...
SIZE=${SIZE:-small}
case $SIZE in
  # issue 38: >= 10 same-batch pairs for the mask, >= 5 seeds for the identity-aware variants
  small-dense)  out=ablation_dense_out;  recipe=recipes/ablation_dense.yaml;    table=docs/ablation_dense.md
                seeds="0 1 2 3 4 5 6 7 8 9"; seeds_other="0 1 2 3 4"; hn=3 ;;
  small-skewed) out=ablation_skewed_out; recipe=recipes/ablation_sampling.yaml; table=docs/ablation_skewed.md
                seeds="0 1 2"; seeds_other=$seeds; hn=5 ;;
  *)            out=ablation_out;        recipe=recipes/ablation_sampling.yaml; table=docs/ablation.md
                seeds="0 1 2"; seeds_other=$seeds; hn=5 ;;
esac
OUT=${OUT:-$out}
RECIPE=${RECIPE:-$recipe}
TABLE=${TABLE:-$table}
SEEDS=${SEEDS:-$seeds}
SEEDS_OTHER=${SEEDS_OTHER:-${seeds_other:-$SEEDS}}
STEPS=${STEPS:-}
HN=${HN:-$hn}
VARIANTS=${VARIANTS:-"naive_unmasked naive_masked identity identity_hn"}
JOBS=${JOBS:-1}
RESULTS=${RESULTS:-docs/results/$(basename "$TABLE" .md)}   # per-seed result files (docs/experiments.md)
# the command that reproduces this study into these folders (every folder spelled out, so
# running it as printed never writes into another study's OUT, RESULTS or TABLE)
COMMAND="SIZE=$SIZE OUT=$OUT RESULTS=$RESULTS TABLE=$TABLE RECIPE=$RECIPE SEEDS=\"$SEEDS\" SEEDS_OTHER=\"$SEEDS_OTHER\" \
VARIANTS=\"$VARIANTS\" HN=$HN JOBS=$JOBS ${STEPS:+STEPS=$STEPS }bash eval/ablation_sampling.sh"
mkdir -p "$OUT"
# shellcheck disable=SC2086  # VARIANTS is a word list
check_names variant "naive_unmasked naive_masked identity identity_hn naive" $VARIANTS
ensure_benchmark
ensure_model

# One training + evaluation; its output goes to OUT/<variant>-<seed>/log.txt.
run_one() {
  local variant=$1 seed=$2 strategy negatives=0 mask=true
  case $variant in
    naive_unmasked) strategy=naive; mask=false ;;
    naive_masked|naive) strategy=naive ;;
    identity)       strategy=identity_aware ;;
    identity_hn)    strategy=identity_aware; negatives=$HN ;;
  esac
  local dir="$OUT/$variant-$seed"
  [ -f "$dir/eval/results.json" ] && [ -f "$RESULTS/${variant}_seed$seed.json" ] && return 0
  mkdir -p "$dir"
  echo "== $variant, seed $seed (log: $dir/log.txt)"
  {  # each step only after the one before succeeded (`set -e` does not hold on the left of `||`)
    { [ -f "$dir/run/final/adapter_config.json" ] || $VIS train "$RECIPE" --resume \
      --set model="$OUT/model" --set data="$OUT/synth/train.yaml" \
      --set schedule="$dir/schedule.parquet" --set output_dir="$dir/run" --set seed="$seed" \
      --set sampling.strategy="$strategy" --set sampling.hard_negatives="$negatives" \
      --set loss.identity_mask="$mask" --set logging.tensorboard=false ${STEPS:+--set max_steps="$STEPS"}; } &&
    evaluate "$dir/run/final" "$dir/eval" &&
    # the per-seed result file the table is built from (metrics, loss, schedule hash, provenance)
    $PY eval/study_results.py write --study "$(basename "$TABLE" .md)" --arm "$variant" \
      --seed "$seed" --run-dir "$dir/run" --schedule "$dir/schedule.parquet" --data "$OUT/synth/train.yaml" \
      --out "$RESULTS" --command "$COMMAND"
  } > "$dir/log.txt" 2>&1 || { echo "!! $variant, seed $seed failed: see $dir/log.txt" >&2; return 1; }
}

all_seeds=$(printf '%s\n' $SEEDS $SEEDS_OTHER | sort -n -u | tr '\n' ' ')
for seed in $all_seeds; do
  for variant in $VARIANTS; do
    case $variant in  # identity-aware variants: SEEDS_OTHER; the naive ones: SEEDS
      identity|identity_hn) [[ " $SEEDS_OTHER " == *" $seed "* ]] || continue ;;
      *)                    [[ " $SEEDS " == *" $seed "* ]] || continue ;;
    esac
    launch run_one "$variant" "$seed"
  done
done
wait_all

# shellcheck disable=SC2086  # SEEDS and VARIANTS are word lists
$PY eval/ablation_table.py "$OUT" --seeds $all_seeds --variants $VARIANTS --synth-size "$SIZE" \
  --recipe "$RECIPE" --out "$TABLE" --results "$RESULTS" --command "$COMMAND"
