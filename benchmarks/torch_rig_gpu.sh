#!/usr/bin/env bash
# The torch rig on a GPU under the shared harness: random:e2b in bfloat16, 512-token prompts,
# 128 output tokens, at concurrency 1, 8 and 32. Compare with DESIGN.md's eager `generate`
# figures on one H200 (14.5, 174 and 624 tok/s).
#
#   benchmarks/torch_rig_gpu.sh prepare               # materialise random:e2b once (~9 GB)
#   benchmarks/torch_rig_gpu.sh run [OUT_DIR] [CONCURRENCY...]
#
# Run from the repository root with its dependencies importable (torch with CUDA,
# transformers, the harness). Environment knobs:
#   RIGBENCH_CACHE   where random:e2b is written (default .rigbench/cache, kept between runs)
#   REQUESTS         measured requests per cell (default: 8 at c=1, 16 at c=8, c above that)
#   WARMUP           warm-up requests before each cell (default 2)
#   BATCHING         torch rig setting: serial (default) or batched (static batches)
#   PORT             default 8000
#   MODEL, DTYPE     default random:e2b, bfloat16
# Each cell is its own harness run, so one cell fits a short time limit:
#   benchmarks/torch_rig_gpu.sh run runs/torch-gpu 1; ... run runs/torch-gpu 8; ...
set -euo pipefail
cd "$(dirname "$0")/.."

export RIGBENCH_CACHE="${RIGBENCH_CACHE:-$PWD/.rigbench/cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python}"
PORT="${PORT:-8000}"
WARMUP="${WARMUP:-2}"
BATCHING="${BATCHING:-serial}"
MODEL="${MODEL:-random:e2b}"  # MODEL=random:tiny DTYPE=float32 rehearses this on a CPU
DTYPE="${DTYPE:-bfloat16}"

prepare() {
  local start=$SECONDS
  "$PYTHON" -c "from rigs.sources import resolve_model; print(resolve_model('$MODEL').path)"
  echo "$MODEL ready in $((SECONDS - start)) s"
}

run() {
  local out="${1:-runs/torch-gpu-$(date -u +%Y%m%dT%H%M%SZ)}"
  shift || true
  local concurrency=("$@")
  if ((${#concurrency[@]} == 0)); then concurrency=(1 8 32); fi
  mkdir -p "$out"
  prepare

  local start=$SECONDS
  "$PYTHON" -m rigbench rig serve torch --model "$MODEL" --dtype "$DTYPE" \
    --host 127.0.0.1 --port "$PORT" --set "batching=$BATCHING" >"$out/server.log" 2>&1 &
  local server=$!
  # shellcheck disable=SC2064  # expand $server now: the trap must stop this server
  trap "kill $server 2>/dev/null; wait $server 2>/dev/null || true" EXIT

  local state
  until state=$("$PYTHON" -m rigs.readiness --base-url "http://127.0.0.1:$PORT" --timeout 120); do
    if ! kill -0 "$server" 2>/dev/null; then
      echo "the rig exited; see $out/server.log" >&2
      tail -n 30 "$out/server.log" >&2
      exit 1
    fi
    sleep 5
  done
  echo "ready in $((SECONDS - start)) s: $state"
  curl -sf "http://127.0.0.1:$PORT/provenance" >"$out/provenance.json"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.csv" || true

  local c n
  for c in "${concurrency[@]}"; do
    if ((c >= 16)); then n=$c; else n=$((c * 2 > 8 ? c * 2 : 8)); fi
    n=${REQUESTS:-$n}
    echo "== concurrency $c, $n requests"
    "$PYTHON" -m rigbench bench --url "http://127.0.0.1:$PORT" --model "$MODEL" \
      --concurrency "$c" --input-len 512 --output-len 128 --requests "$n" --warmup "$WARMUP" \
      --out "$out/c$c.json" | tee "$out/c$c.txt"
  done
  echo "reports in $out"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
