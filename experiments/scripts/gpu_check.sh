#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, time real gradients on `cuda` and run a short
# distributed experiment whose gradients are computed on the GPU. Needs no compiler and no
# package registry: build the binary elsewhere and bring it along.
#
#   cargo build --release --features cuda          # on a build machine (no GPU needed)
#   DSGD_BIN=target/release/dsgd experiments/scripts/gpu_check.sh
#
# The data: Fashion-MNIST under /usr/share/datasets/fashion-mnist, or $DSGD_FASHION_MNIST (copy
# the four .gz files along with the binary). Prints step time, samples per second and the
# achieved fraction of the GPU's FP32 peak; takes well under 5 minutes.
set -euo pipefail
bin=${DSGD_BIN:-target/release/dsgd}
out=${OUT:-$(mktemp -d)}
[ -x "$bin" ] || { echo "no dsgd binary at $bin (set DSGD_BIN)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "(nvidia-smi not found)"

for spec in "resnet18 256" "resnet20 256" "cnn 1024" "mlp 1024"; do
    set -- $spec
    timeout 120 "$bin" bench-gradient --model "$1" --batch "$2" --device cuda --steps 20 --warmup 3 \
        --json "$out/bench_$1.json"
done
# The same network on the CPU, for comparison (few steps: it is slow there).
timeout 120 "$bin" bench-gradient --model resnet20 --batch 64 --device cpu --steps 3 --warmup 1

# A short synchronous 4-worker run with real ResNet-20 gradients on the GPU, its gradient
# durations measured there and recorded; then its exact replay from the recording.
cat > "$out/gpu_sync.json" <<'JSON'
{
  "name": "gpu_sync_resnet20",
  "nodes": 4,
  "algorithm": {"kind": "sync"},
  "batch": 128,
  "optimizer": {"lr": 0.05, "momentum": 0.9},
  "workload": {"kind": "burn", "model": "resnet20", "device": "cuda", "test_samples": 2000},
  "compute": {"gradient_time": "measured"},
  "network": {"latency_us": 5, "bandwidth_gbps": 100},
  "eval": {"every_s": 1.0},
  "stop": {"sim_time_s": 60, "iterations": 100}
}
JSON
timeout 200 "$bin" run "$out/gpu_sync.json" --out "$out/run"
timeout 100 "$bin" replay "$out/run"
echo "outputs in $out"
