#!/usr/bin/env bash
# The simulator validated across an emulated network (netns_cluster.sh): every validation spec
# of experiments/specs/real with 4 ranks and with 8 (sync and gossip 8 workers; a server's or a
# centre's 7 workers and itself), the incast spec (8 workers pushing to one shard, 9 ranks) and
# the two-rack spec (7 workers and a shard in two racks of 4, the racks joined by one uplink of
# the NICs' rate, which the 4 workers of the first rack share to reach the shard), each host's
# NIC shaped to --gbps, each validation --reps times. Writes each validation's folder
# and summary.md (every spec's error in each repetition, the mean and largest |error|).
#
#   experiments/scripts/validate_netns.sh [--reps 3] [--gbps 1] [--dsgd target/release/dsgd] \
#       [--out results/validation/netns]
#
# Needs root (network namespaces), Open MPI, python3 (the summary), and a dsgd built with
# `--features mpi`.
set -euo pipefail

reps=3
gbps=1
dsgd=target/release/dsgd
out=results/validation/netns
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --gbps) gbps="$2"; shift 2 ;;
    --dsgd) dsgd="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "validate_netns.sh: unknown argument '$1' (expected --reps, --gbps, --dsgd, --out)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
specs="$here/../specs/real"
[ -x "$dsgd" ] || { echo "validate_netns.sh: no dsgd at $dsgd (cargo build --release --features mpi)" >&2; exit 2; }
dsgd=$(cd "$(dirname "$dsgd")" && pwd)/$(basename "$dsgd")
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

four=()
eight=()
for f in "$specs"/*.json; do
  name=$(basename "$f" .json)
  case "$name" in incast|racks) continue ;; esac
  four+=("$f")
  if grep -q '"kind": "async_ps"\|"kind": "easgd"' "$f"; then n=7; else n=8; fi
  sed -e "s/\"nodes\": [0-9]*/\"nodes\": $n/" -e "s/\"name\": \"\([^\"]*\)\"/\"name\": \"\1-8\"/" "$f" > "$tmp/$name.json"
  eight+=("$tmp/$name.json")
done

# One validation, unless a finished one is there already (so that a run cut short resumes).
one() {
  local dir="$1"; shift
  [ -f "$dir/validation.json" ] && return 0
  rm -rf "$dir"
  "$here/netns_cluster.sh" "$@" -- "$dsgd" validate "${specs_of[@]}" --out "$dir" --token-bucket
}
for k in $(seq 1 "$reps"); do
  specs_of=("${four[@]}"); one "$out/ranks4-rep$k" --hosts 4 --gbps "$gbps"
  specs_of=("${eight[@]}"); one "$out/ranks8-rep$k" --hosts 8 --gbps "$gbps"
  specs_of=("$specs/incast.json"); one "$out/incast-rep$k" --hosts 9 --gbps "$gbps"
  specs_of=("$specs/racks.json"); one "$out/racks-rep$k" --hosts 8 --gbps "$gbps" --racks 2
done

python3 - "$out" "$reps" "$gbps" <<'EOF'
import json, sys, os
out, reps, gbps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for group in ("ranks4", "ranks8", "incast", "racks"):
    for k in range(1, reps + 1):
        path = os.path.join(out, f"{group}-rep{k}", "validation.json")
        if not os.path.exists(path):
            continue
        for c in json.load(open(path))["comparisons"]:
            key = (group, c["name"], c["algorithm"], c["metric"])
            rows.setdefault(key, []).append(c["error"])
lines = [f"# Validation across an emulated network ({gbps} Gbit/s NICs, {reps} repetitions)", "",
         "| ranks | spec | algorithm | metric | " + " | ".join(f"error {k}" for k in range(1, reps + 1)) + " | mean abs |",
         "|---|---|---|---|" + "---:|" * reps + "---:|"]
errs = []
for (group, name, alg, metric), e in rows.items():
    ranks = {"ranks4": "4", "ranks8": "8", "incast": "9", "racks": "8 (2 racks)"}[group]
    errs += e
    cells = " | ".join(f"{x * 100:+.1f}%" for x in e)
    lines.append(f"| {ranks} | {name} | {alg} | {metric} | {cells} | {sum(abs(x) for x in e) / len(e) * 100:.1f}% |")
if errs:
    lines += ["", f"Over {len(errs)} comparisons: mean |error| {sum(abs(x) for x in errs) / len(errs) * 100:.1f}%, "
              f"largest {max(abs(x) for x in errs) * 100:.1f}%."]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
