#!/usr/bin/env bash
# An emulated cluster on this machine: N hosts (network namespaces), each with one NIC (a veth
# pair into a bridge, the switch) shaped both ways by a token bucket (`tbf`) to a NIC's rate;
# then a command run under `mpirun` with one rank per host, its TCP traffic pinned to the
# bridge's subnet. Everything it creates is removed when it ends, also on failure or Ctrl-C.
# It addresses only the namespaces it made.
#
#   experiments/scripts/netns_cluster.sh [--hosts N] [--gbps R] [--racks 1|2] [--uplink-gbps U]
#       [--prefix P] [--subnet A.B.C] -- COMMAND...
#   experiments/scripts/netns_cluster.sh --hosts 4 --gbps 1 -- \
#       target/release/dsgd real experiments/specs/real/sync.json --out runs/ns-sync
#
# With --racks 2 the hosts are split in two racks (the first half, the second), each its own
# bridge, and the racks are joined by one link shaped to --uplink-gbps both ways (default: the
# NIC rate), so that traffic between racks shares it: an oversubscribed uplink.
#
# COMMAND runs under `mpirun -np N` (as root: --allow-run-as-root --oversubscribe). Exit codes:
# the command's own; 77 when namespaces cannot be created here (no privilege), so that a test
# can say it was skipped; 2 for bad arguments.
set -euo pipefail

hosts=4
gbps=1
prefix=dsgdns
subnet=10.213.0
racks=1
uplink=
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --gbps) gbps="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    --racks) racks="$2"; shift 2 ;;
    --uplink-gbps) uplink="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "netns_cluster.sh: unknown argument '$1' (expected --hosts, --gbps, --prefix, --subnet, then -- COMMAND)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "netns_cluster.sh: no command given after --" >&2
  exit 2
fi
case "$hosts" in ''|*[!0-9]*) echo "netns_cluster.sh: --hosts must be a whole number, not '$hosts'" >&2; exit 2 ;; esac
if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 200 ]; then
  echo "netns_cluster.sh: --hosts must be between 1 and 200, not $hosts" >&2
  exit 2
fi
# A rate in Gbit/s: above 0 and at most 100.
rate_ok() { awk -v r="$1" 'BEGIN { exit !(r + 0 > 0 && r + 0 <= 100) }'; }
# A token bucket's burst for a rate: at least a timer tick's worth of bytes (and 64 KB).
burst_of() { awk -v r="$1" 'BEGIN { b = r * 1e9 / 8 / 1000; if (b < 65536) b = 65536; printf "%d", b }'; }
if ! rate_ok "$gbps"; then
  echo "netns_cluster.sh: --gbps must be a rate above 0 and at most 100, not '$gbps'" >&2
  exit 2
fi
case "$racks" in 1|2) ;; *) echo "netns_cluster.sh: --racks must be 1 or 2, not '$racks'" >&2; exit 2 ;; esac
uplink=${uplink:-$gbps}
if ! rate_ok "$uplink"; then
  echo "netns_cluster.sh: --uplink-gbps must be a rate above 0 and at most 100, not '$uplink'" >&2
  exit 2
fi
if [ "$racks" = 2 ] && [ "$hosts" -lt 2 ]; then
  echo "netns_cluster.sh: two racks need at least 2 hosts" >&2
  exit 2
fi
case "$prefix" in ''|*[!a-z0-9]*) echo "netns_cluster.sh: --prefix must be lower-case letters and digits" >&2; exit 2 ;; esac
if [ ${#prefix} -gt 9 ]; then
  echo "netns_cluster.sh: --prefix must be at most 9 characters (interface names are short)" >&2
  exit 2
fi
if ! echo "$subnet" | grep -Eq '^10\.[0-9]{1,3}\.[0-9]{1,3}$'; then
  echo "netns_cluster.sh: --subnet must be the first three numbers of a 10.x.y.0/24 network, e.g. 10.213.0" >&2
  exit 2
fi
bridge="${prefix}br"
work=$(mktemp -d)

cleanup() {
  for i in $(seq 0 $((hosts - 1))); do
    # Whatever still runs in the host (a rank whose mpirun was stopped) goes with it.
    ip netns pids "${prefix}h$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "${prefix}h$i" 2>/dev/null || true
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  ip link del "${bridge}1" 2>/dev/null || true
  ip link del "${prefix}u0" 2>/dev/null || true
  rm -rf "$work"
}
mpirun_pid=
# On Ctrl-C or a kill: stop mpirun (and its ranks) first, then clean up.
stop() {
  if [ -n "$mpirun_pid" ]; then
    kill -TERM "$mpirun_pid" 2>/dev/null || true
    wait "$mpirun_pid" 2>/dev/null || true
  fi
  exit "$1"
}
trap cleanup EXIT
trap 'stop 130' INT
trap 'stop 143' TERM

if ! ip netns add "${prefix}probe" 2>/dev/null; then
  echo "netns_cluster.sh: cannot create network namespaces here (needs root or CAP_NET_ADMIN)" >&2
  exit 77
fi
ip netns del "${prefix}probe"

burst=$(burst_of "$gbps")

ip link add "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
if [ "$racks" = 2 ]; then
  # The second rack's switch, and the uplink between the two, shaped both ways.
  ip link add "${bridge}1" type bridge
  ip link set "${bridge}1" up
  ip link add "${prefix}u0" type veth peer name "${prefix}u1"
  ip link set "${prefix}u0" master "$bridge" up
  ip link set "${prefix}u1" master "${bridge}1" up
  ubrst=$(burst_of "$uplink")
  tc qdisc add dev "${prefix}u0" root tbf rate "${uplink}gbit" burst "$ubrst" latency 100ms
  tc qdisc add dev "${prefix}u1" root tbf rate "${uplink}gbit" burst "$ubrst" latency 100ms
fi
: > "$work/hostfile"
for i in $(seq 0 $((hosts - 1))); do
  ns="${prefix}h$i"
  sw="$bridge"
  if [ "$racks" = 2 ] && [ "$i" -ge $((hosts / 2)) ]; then sw="${bridge}1"; fi
  ip netns add "$ns"
  ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${prefix}v$i" master "$sw" up
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # The host's NIC: what it sends (inside the namespace) and what it receives (the bridge's
  # side of the pair sends it), each at the rate.
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${gbps}gbit" burst "$burst" latency 100ms
  tc qdisc add dev "${prefix}v$i" root tbf rate "${gbps}gbit" burst "$burst" latency 100ms
  echo "$ns slots=1" >> "$work/hostfile"
done

# mpirun starts its daemon on each "host" through this agent, inside that host's namespace.
cat > "$work/agent" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
exec ip netns exec "$host" /bin/sh -c "$*"
EOF
chmod +x "$work/agent"

root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
# TCP's progress thread moves a message's bytes while its rank works, as a NIC does, and spares
# an idle rank's look for messages a poll() of every socket: eight idle ranks took 10-14% of two
# cores with it and 17-25% without.
# In the background, so that a signal reaches the traps above while it runs. Open MPI 4.1's
# daemon now and then dies of a segmentation fault in hwloc while it starts (seen once in 40
# launches here); such a launch, failed by signal within 10 s, is tried once more.
for attempt in 1 2; do
  started=$(date +%s)
  mpirun "${root[@]}" --oversubscribe -np "$hosts" --hostfile "$work/hostfile" \
    --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca btl_tcp_progress_thread 1 --mca btl_tcp_eager_limit 65536 \
    "$@" &
  mpirun_pid=$!
  set +e
  wait "$mpirun_pid"
  code=$?
  set -e
  mpirun_pid=
  if [ "$attempt" = 1 ] && [ "$code" -gt 128 ] && [ $(($(date +%s) - started)) -lt 10 ]; then
    echo "netns_cluster.sh: mpirun failed by signal $((code - 128)) while starting; trying once more" >&2
    for i in $(seq 0 $((hosts - 1))); do
      ip netns pids "${prefix}h$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    done
    continue
  fi
  break
done
exit $code
