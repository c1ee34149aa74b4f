#!/usr/bin/python3
"""The ring all-reduce of one synchronous iteration in SimGrid, to compare with dsgd.

Usage: simgrid_ring.py NODES BYTES [LATENCY_US] [GBPS]

Models what `dsgd bench-scale`'s sync_ring case simulates, without the gradient step: NODES hosts
on one non-blocking switch (SimGrid cluster, split-duplex private links of GBPS and half the
latency each, a fat-pipe backbone), each running 2(NODES-1) ring steps of BYTES/NODES: send the
chunk to the next host, receive from the previous, wait for both. Network model CM02 with no TCP
factors, so that a lone message takes latency + size/bandwidth as in dsgd. Prints one JSON line:
nodes, messages, simulated seconds, wall seconds.

Needs Debian's python3-simgrid (3.32 here).
"""
import json
import os
import sys
import tempfile
import time

from simgrid import Actor, Engine, Mailbox


def main():
    n = int(sys.argv[1])
    size = float(sys.argv[2])
    lat_us = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    gbps = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    platform = f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="c" prefix="h" suffix="" radical="0-{n - 1}" speed="1Gf" bw="{gbps}Gbps" lat="{lat_us / 2}us"
           bb_bw="1000000Gbps" bb_lat="0us" sharing_policy="SPLITDUPLEX" bb_sharing_policy="FATPIPE"/>
</platform>
"""
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(platform)
        path = f.name
    started = time.perf_counter()
    e = Engine([sys.argv[0], "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                "--log=root.thres:critical"])
    e.load_platform(path)
    chunk = int(size // n)
    steps = 2 * (n - 1)

    def worker(i):
        nxt = Mailbox.by_name(f"m{(i + 1) % n}")
        me = Mailbox.by_name(f"m{i}")
        for _ in range(steps):
            sent = nxt.put_async(i, chunk)
            me.get()
            sent.wait()

    for i in range(n):
        Actor.create(f"w{i}", e.host_by_name(f"h{i}"), worker, i)
    e.run()
    wall = time.perf_counter() - started
    os.unlink(path)
    print(json.dumps({"nodes": n, "messages": n * steps, "simulated_s": e.clock, "wall_s": wall}))


if __name__ == "__main__":
    main()
