#!/usr/bin/env bash
# `vis-embed encode` itself, end to end on a GPU (issue 28 item 5): the random Qwen2-VL-2B
# checkpoint and a photo-mix gallery are written first (benchmarks/gpu_encode.py's helpers),
# then the command runs with `--workers auto` and with `--workers 0`; wall times include the
# interpreter, the model load and the workers' start, as a user sees them.  The two outputs
# must agree (cosine >= 0.99999).
#
#   bash benchmarks/gpu_encode_cli.sh [ITEMS]                        # on a GPU machine
#   WORKERS=auto bash benchmarks/gpu_encode_cli.sh 2048              # one worker setting only
#   PRESET=tiny DEVICE=cpu bash benchmarks/gpu_encode_cli.sh 16      # smoke run on a CPU
set -euo pipefail
ITEMS=${1:-512}
PRESET=${PRESET:-qwen2-vl-2b}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$(dirname "$0")"
"$PYTHON" - "$WORK" "$ITEMS" "$PRESET" "$DEVICE" <<'EOF'
import json, sys, torch
from pathlib import Path
from gpu_encode import PHOTO_SIZES, build_model, photo_gallery
work, items, preset, device = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], torch.device(sys.argv[4])
if __name__ == "__main__":
    model = build_model("qwen2-vl", preset, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    model.backbone.save_pretrained(work / "model")
    model.processor.save_pretrained(work / "model")
    rows = photo_gallery(work, 32, items, PHOTO_SIZES)
    (work / "gallery.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
EOF
for workers in ${WORKERS:-auto 0}; do
  TIMEFORMAT="vis-embed encode --workers $workers: $ITEMS photos in %R s (wall, everything included)"
  time "$PYTHON" -m vis_embed encode --model "$WORK/model" --input "$WORK/gallery.jsonl" \
    --output "$WORK/w$workers.npy" --workers "$workers" --decode fast --batch-size 64 --device "$DEVICE" \
    --no-progress --instruction "Find the same object as the one in the given image."
done
[ -f "$WORK/w0.npy" ] && [ -f "$WORK/wauto.npy" ] && "$PYTHON" -c "
import numpy as np, sys
a, b = np.load('$WORK/wauto.npy'), np.load('$WORK/w0.npy')
print(f'rows {len(a)}, min cosine auto vs 0: {float((a * b).sum(1).min()):.6f}')
"
