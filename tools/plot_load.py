#!/usr/bin/env python3
"""Plots load sweeps: throughput (x) against p50 and p99 latency (y), one line pair per file.

The input files are what `tensorcompute load --sweep-concurrency ... --csv FILE` (or
`--json FILE`) writes (client/load_sweep.h): CSV with the columns throughput_rps, p50_us,
p99_us (and mode, value, op, protocol), or a JSON array of load reports (qps,
latency_us_p50, latency_us_p99, sweep, value, op, protocol); a single run's report (a JSON
object, or a CSV of one row) is a sweep of one point. Points are drawn in the file's order,
each p50 point marked with its concurrency (or rate).

  .venv/bin/python3 tools/plot_load.py native.csv kserve.csv --label native --label KServe \\
      --title "Gather, 100000x64 float32 resident, 64 indices" --out docs/images/load-sweep.png

Without --label, a file's label is its rows' "op protocol" (e.g. "gather native"), or its name.
Latency is in milliseconds on a log scale (--linear for a linear one); throughput in calls
(requests) per second. Needs matplotlib (tools/install-deps.sh puts it in .venv); draws with
the Agg backend, so no display is needed. Exit codes: 0 written, 2 bad arguments or input.
"""

import argparse
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib import ticker  # noqa: E402


class InputError(Exception):
    pass


def _number(row, key, path, index):
    try:
        value = float(row[key])
    except KeyError:
        raise InputError(f"{path}: point {index + 1} has no {key!r}") from None
    except (TypeError, ValueError):
        raise InputError(f"{path}: point {index + 1}: {key} = {row[key]!r} is not a number") \
            from None
    if value != value or value < 0:
        raise InputError(f"{path}: point {index + 1}: {key} = {value} is not a non-negative "
                         "number")
    return value


def read_points(path):
    """Returns (points, default label) of one CSV or JSON file.

    Each point is a dict: value (the concurrency or rate; None if unknown), throughput
    (calls/s), p50_ms, p99_ms.
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    stripped = text.lstrip()
    if stripped.startswith("[") or stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not valid JSON: {e}") from None
        rows = data if isinstance(data, list) else [data]
        if not all(isinstance(r, dict) for r in rows):
            raise InputError(f"{path}: expected a JSON array of load reports")
        keys = ("qps", "latency_us_p50", "latency_us_p99")
    else:
        rows = list(csv.DictReader(text.splitlines()))
        keys = ("throughput_rps", "p50_us", "p99_us")
    if not rows:
        raise InputError(f"{path}: no points")
    points = []
    for i, row in enumerate(rows):
        throughput, p50, p99 = (_number(row, k, path, i) for k in keys)
        value = row.get("value")
        try:
            value = float(value) if value is not None else None
        except ValueError:
            value = None
        points.append({"value": value, "throughput": throughput, "p50_ms": p50 / 1e3,
                       "p99_ms": p99 / 1e3})
    ops = {(r.get("op"), r.get("protocol")) for r in rows}
    if len(ops) == 1 and None not in next(iter(ops)):
        op, protocol = next(iter(ops))
        label = f"{op} {protocol}"
    else:
        label = os.path.splitext(os.path.basename(path))[0]
    return points, label


def _latency_label(value, _position=None):
    """A log axis' tick as a plain number (0.2, 1, 50), and only at 1, 2 and 5 per decade."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
    if min(abs(mantissa - m) for m in (1, 2, 5)) > 1e-6:
        return ""
    return f"{value:g}"


def _value_text(value):
    if value is None:
        return ""
    return f"{value:g}"


def plot(series, out, title=None, linear=False, annotate=True, width=8.0, height=5.0, dpi=100):
    """Draws `series` [(label, points)] into the PNG `out`."""
    fig, ax = plt.subplots(figsize=(width, height), dpi=dpi)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (label, points) in enumerate(series):
        color = colors[k % len(colors)]
        x = [p["throughput"] for p in points]
        ax.plot(x, [p["p50_ms"] for p in points], marker="o", markersize=4, color=color,
                linestyle="-", label=f"{label} p50")
        ax.plot(x, [p["p99_ms"] for p in points], marker="^", markersize=4, color=color,
                linestyle="--", label=f"{label} p99")
        if annotate:
            for p in points:
                if p["value"] is not None:
                    ax.annotate(_value_text(p["value"]), (p["throughput"], p["p50_ms"]),
                                textcoords="offset points", xytext=(3, -9), fontsize=7,
                                color=color)
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("latency (ms)")
    if not linear:
        ax.set_yscale("log")
        latencies = [p[k] for _, points in series for p in points for k in ("p50_ms", "p99_ms")
                     if p[k] > 0]
        # Over a narrow range every minor tick gets a label, else only 1, 2 and 5 per decade.
        narrow = latencies and max(latencies) < 5 * min(latencies)
        label = ticker.FuncFormatter(lambda v, _: f"{v:g}") if narrow else \
            ticker.FuncFormatter(_latency_label)
        ax.yaxis.set_major_formatter(label)
        ax.yaxis.set_minor_formatter(label)
    ax.set_xlim(left=0)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, format="png", dpi=dpi)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Plot `tensorcompute load` sweeps (CSV or JSON): throughput (requests/s) "
                    "against p50 and p99 latency (ms), one line pair per file, into a PNG.",
        epilog="Example: tensorcompute load --sweep-concurrency 1,2,4,8,16 --duration 3 "
               "--csv native.csv; then tools/plot_load.py native.csv --out sweep.png. "
               "Each p50 point is marked with its concurrency (or rate).")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="a sweep's --csv or --json output")
    parser.add_argument("--label", action="append", default=[],
                        help="the legend name of the n-th FILE (repeat once per file; default: "
                             "its rows' op and protocol, or the file's name)")
    parser.add_argument("--out", default="load-sweep.png", help="the PNG to write "
                        "(default: %(default)s)")
    parser.add_argument("--title", help="a title above the plot")
    parser.add_argument("--linear", action="store_true",
                        help="linear latency axis (default: logarithmic)")
    parser.add_argument("--no-annotate", action="store_true",
                        help="do not mark points with their concurrency or rate")
    parser.add_argument("--size", default="8x5", metavar="WxH",
                        help="figure size in inches (default: %(default)s)")
    parser.add_argument("--dpi", type=int, default=100, help="dots per inch (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.files):
        parser.error(f"{len(args.label)} --label for {len(args.files)} files: give one per file "
                     "or none")
    try:
        width, height = (float(v) for v in args.size.lower().split("x"))
        if not (0 < width <= 40 and 0 < height <= 40):
            raise ValueError
    except ValueError:
        parser.error(f"--size {args.size}: expected WxH in inches, e.g. 8x5")
    if not 20 <= args.dpi <= 600:
        parser.error(f"--dpi {args.dpi}: expected 20..600")
    series = []
    try:
        for i, path in enumerate(args.files):
            points, label = read_points(path)
            series.append((args.label[i] if args.label else label, points))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        plot(series, args.out, title=args.title, linear=args.linear,
             annotate=not args.no_annotate, width=width, height=height, dpi=args.dpi)
    except OSError as e:
        print(f"error: --out {args.out}: cannot write: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {sum(len(p) for _, p in series)} points from {len(series)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
