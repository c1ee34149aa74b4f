#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, in under 10 minutes, from a binary built elsewhere:
#   1. the gradient step time and samples/s of every model on CUDA, beside the CPU;
#   2. two CUDA runs of one real-network spec, their digests compared (is the GPU bit for bit
#      repeatable?);
#   3. a short ResNet-20 comparison of sync and gossip at 4 and 16 workers on the GPU.
# Everything goes into one JSON file ($OUT/gpu_check.json) and a Markdown table
# ($OUT/gpu_check.md) to paste into README.
#
#   cargo build --release --features cuda          # on a build machine (no GPU needed)
#   DSGD_BIN=target/release/dsgd OUT=gpu experiments/scripts/gpu_check.sh
#
# Needs only bash, coreutils and the binary; the data: Fashion-MNIST under
# /usr/share/datasets/fashion-mnist, or $DSGD_FASHION_MNIST (copy the four .gz files along).
# Without a GPU, or with a binary built without CUDA, it refuses at once with exit code 3 and
# says why; other failures exit 2.
set -euo pipefail
bin=${DSGD_BIN:-target/release/dsgd}
out=${OUT:-$(mktemp -d)}

refuse() { echo "gpu_check: $*" >&2; exit 3; }
command -v nvidia-smi >/dev/null 2>&1 ||
    refuse "no NVIDIA GPU here (nvidia-smi is not installed); run this on a machine with an NVIDIA GPU and driver"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true)
[ -n "$gpus" ] || refuse "nvidia-smi finds no GPU (or the driver does not answer); nothing to check"
[ -x "$bin" ] || { echo "gpu_check: no dsgd binary at $bin (set DSGD_BIN)" >&2; exit 2; }
mkdir -p "$out"
# A binary without CUDA says so on its first CUDA gradient: refuse with its words.
if ! probe=$(timeout 120 "$bin" bench-gradient --model mlp --batch 32 --device cuda --steps 1 --warmup 0 2>&1); then
    refuse "$bin cannot compute on the GPU: $(echo "$probe" | tail -n 1)"
fi
gpu=$(echo "$gpus" | head -n 1)
echo "GPU: $gpu; outputs in $out"

# 1. Gradient steps: each model on CUDA, and on the CPU (fewer steps: it is slow there).
grads=()
for m in "mlp 1024 20" "cnn 1024 20" "resnet20 256 20" "resnet18 256 10"; do
    set -- $m
    timeout 150 "$bin" bench-gradient --model "$1" --batch "$2" --device cuda --steps "$3" --warmup 3 \
        --json "$out/grad_$1_cuda.json" >/dev/null
    grads+=("$out/grad_$1_cuda.json")
done
for m in "mlp 1024 10" "cnn 256 3" "resnet20 64 3"; do
    set -- $m
    timeout 150 "$bin" bench-gradient --model "$1" --batch "$2" --device cpu --steps "$3" --warmup 1 \
        --json "$out/grad_$1_cpu.json" >/dev/null
    grads+=("$out/grad_$1_cpu.json")
done

# 2. One real-network spec on the GPU, twice (modelled step times, so only the arithmetic can
#    make the digests differ).
spec() { # name nodes algorithm-json sim-seconds
    cat <<JSON
{"name": "$1", "nodes": $2, "algorithm": $3, "batch": 128, "optimizer": {"lr": 0.05, "momentum": 0.9},
 "workload": {"kind": "burn", "model": "resnet20", "device": "cuda", "test_samples": 1000},
 "compute": {"step_time_ms": 50}, "network": {"latency_us": 5, "bandwidth_gbps": 100},
 "eval": {"every_s": 1.0}, "stop": {"sim_time_s": $4}}
JSON
}
spec repeat 4 '{"kind": "sync"}' 5 > "$out/repeat.json"
for k in 1 2; do
    timeout 200 "$bin" run "$out/repeat.json" --out "$out/repeat_$k" --json >"$out/repeat_$k.summary.json"
done
digest() { grep -o '"digest": *"[0-9a-f]*"' "$1" | head -n 1 | grep -o '[0-9a-f]\{8,\}'; }
d1=$(digest "$out/repeat_1/summary.json")
d2=$(digest "$out/repeat_2/summary.json")
same=$([ "$d1" = "$d2" ] && echo true || echo false)

# 3. Sync and gossip with ResNet-20 at 4 and 16 workers.
runs=()
for a in sync gossip; do
    for n in 4 16; do
        spec "${a}_$n" "$n" "{\"kind\": \"$a\"}" 5 > "$out/${a}_$n.json"
        timeout 200 "$bin" run "$out/${a}_$n.json" --out "$out/${a}_$n" --json >/dev/null
        runs+=("$out/${a}_$n/summary.json")
    done
done

# One JSON file: the GPU, the gradient timings, the repeat's digests, the comparison's summaries.
join() { local first=1; for f in "$@"; do [ $first = 1 ] || printf ','; first=0; cat "$f"; done; }
{
    printf '{"gpu": "%s", "gradients": [' "$gpu"
    join "${grads[@]}"
    printf '], "repeat": {"digests": ["%s", "%s"], "identical": %s}, "comparison": [' "$d1" "$d2" "$same"
    join "${runs[@]}"
    printf ']}\n'
} >"$out/gpu_check.json"

# The table for README: per model and device, ms a step and samples/s; then the runs.
field() { grep -o "\"$2\": *[0-9.e+-]*" "$1" | head -n 1 | sed 's/.*: *//'; }
{
    echo "GPU: $gpu. Two CUDA runs of one ResNet-20 spec: digests $d1 and $d2 (identical: $same)."
    echo
    echo "| model | device | batch | ms a step | samples/s |"
    echo "|---|---|---:|---:|---:|"
    for f in "${grads[@]}"; do
        b=$(basename "$f" .json); b=${b#grad_}
        ms=$(awk -v s="$(field "$f" mean_s)" 'BEGIN {print s * 1000}')
        printf '| %s | %s | %s | %.2f | %.0f |\n' "${b%_*}" "${b##*_}" "$(field "$f" batch)" "$ms" \
            "$(field "$f" samples_per_s)"
    done
    echo
    echo "| run (ResNet-20, 5 simulated s) | final loss | final accuracy | updates |"
    echo "|---|---:|---:|---:|"
    for f in "${runs[@]}"; do
        printf '| %s | %s | %s | %s |\n' "$(basename "$(dirname "$f")")" "$(field "$f" final_loss)" \
            "$(field "$f" final_accuracy)" "$(field "$f" updates)"
    done
} >"$out/gpu_check.md"
cat "$out/gpu_check.md"
echo "wrote $out/gpu_check.json and $out/gpu_check.md"
