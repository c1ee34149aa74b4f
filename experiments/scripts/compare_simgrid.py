#!/usr/bin/python3
"""Side by side: one message-level ring all-reduce iteration in dsgd and in SimGrid.

Usage: compare_simgrid.py DSGD_BINARY OUT_DIR [NODES ...]   (default nodes: 10 30 100 300)

For each node count, runs `simgrid_ring.py` (SimGrid 3.32, Debian's python3-simgrid) and dsgd on
the same ring (4 MB vector, 10 µs, 10 Gb/s, one switch; dsgd with a 1 µs gradient step, which is
subtracted), and writes OUT_DIR/simgrid_ring.csv (simulated seconds and wall seconds of both, and
the closed form 2(n-1)(α + S/(nB))) and OUT_DIR/simgrid_ring.svg (wall time against nodes, log
scales). dsgd's wall time is its own measure of the run (setup and simulation), SimGrid's the
engine's run in this process.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE, LAT_US, GBPS = 4_000_000, 10.0, 10.0


def dsgd(binary, n):
    spec = {
        "name": f"ring-{n}",
        "nodes": n,
        "algorithm": {"kind": "sync", "collective": "ring"},
        "workload": {"kind": "timing", "params": SIZE // 4},
        "compute": {"step_time_ms": 0.001},
        "network": {"latency_us": LAT_US, "bandwidth_gbps": GBPS},
        "stop": {"iterations": 1, "sim_time_s": 1000},
        "eval": {"every_s": 1000},
    }
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        out = subprocess.run([binary, "run", path, "--out", os.path.join(d, "run"), "--json"],
                             check=True, capture_output=True, text=True).stdout
        s = json.loads(out)
        return s["iteration_time_s"]["mean"] - 1e-6, s["wall_time_s"]


def simgrid(n):
    out = subprocess.run([sys.executable, os.path.join(HERE, "simgrid_ring.py"), str(n), str(SIZE), str(LAT_US),
                          str(GBPS)], check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["simulated_s"], r["wall_s"]


def svg(rows):
    w, h, left, bottom = 520, 340, 70, 50
    xs = [math.log10(r["nodes"]) for r in rows]
    ys = [math.log10(v) for r in rows for v in (r["dsgd_wall_s"], r["simgrid_wall_s"])]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    px = lambda x: left + (math.log10(x) - x0) / (x1 - x0) * (w - left - 130)
    py = lambda y: h - bottom - (math.log10(y) - y0) / (y1 - y0) * (h - bottom - 30)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2 - 40}" y="18" text-anchor="middle">One ring all-reduce iteration: wall time</text>']
    for e in range(y0, y1 + 1):
        y = py(10.0 ** e)
        parts.append(f'<line x1="{left}" x2="{w - 130}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end">1e{e} s</text>')
    for r in rows:
        x = px(r["nodes"])
        parts.append(f'<text x="{x}" y="{h - bottom + 16}" text-anchor="middle">{r["nodes"]}</text>')
    parts.append(f'<text x="{(left + w - 130) / 2}" y="{h - 12}" text-anchor="middle">nodes</text>')
    for key, colour, label in (("dsgd_wall_s", "#1f77b4", "dsgd"), ("simgrid_wall_s", "#d62728", "SimGrid 3.32")):
        pts = " ".join(f"{px(r['nodes'])},{py(r[key])}" for r in rows)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r in rows:
            parts.append(f'<circle cx="{px(r["nodes"])}" cy="{py(r[key])}" r="3" fill="{colour}"/>')
        ly = 60 if key == "dsgd_wall_s" else 80
        parts.append(f'<line x1="{w - 120}" x2="{w - 100}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{w - 95}" y="{ly + 4}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    nodes = [int(n) for n in sys.argv[3:]] or [10, 30, 100, 300]
    rows = []
    for n in nodes:
        d_sim, d_wall = dsgd(binary, n)
        s_sim, s_wall = simgrid(n)
        closed = 2 * (n - 1) * (LAT_US * 1e-6 + (SIZE // n) * 8 / (GBPS * 1e9))
        rows.append({"nodes": n, "messages": 2 * n * (n - 1), "closed_form_s": closed, "dsgd_s": d_sim,
                     "simgrid_s": s_sim, "dsgd_wall_s": d_wall, "simgrid_wall_s": s_wall})
        print(json.dumps(rows[-1]), flush=True)
    os.makedirs(out_dir, exist_ok=True)
    keys = list(rows[0].keys())
    with open(os.path.join(out_dir, "simgrid_ring.csv.tmp"), "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(f"{r[k]:.9g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")
    os.replace(os.path.join(out_dir, "simgrid_ring.csv.tmp"), os.path.join(out_dir, "simgrid_ring.csv"))
    with open(os.path.join(out_dir, "simgrid_ring.svg.tmp"), "w") as f:
        f.write(svg(rows))
    os.replace(os.path.join(out_dir, "simgrid_ring.svg.tmp"), os.path.join(out_dir, "simgrid_ring.svg"))


if __name__ == "__main__":
    main()
