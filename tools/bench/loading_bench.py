#!/usr/bin/env python3
"""Loading a table (issue 28): --preload and `tensorcompute put` against what the machine and
gRPC allow, in one run (docs/performance.md, "Loading").

    .venv/bin/python3 tools/bench/loading_bench.py [--sizes-gib 1,4,16] [--repeats 3]
        [--dir /var/tmp/tc-loading] [--build build] [--bench-bin PATH] [--json FILE]

For each size, a float32 table [rows, 256] is written once to --dir as a .npy (streamed in
64 MiB blocks, never whole in memory; kept for later runs) and read once with `cat` so that
it starts in the page cache. Then --repeats times, the steps interleaved, medians reported:
  cat       `cat FILE > /dev/null`: reading the file, from the page cache when it fits there
            (marked "from disk" when the file is larger than MemAvailable, or fincore finds
            less than 90% of it cached);
  memcpy    np.copyto of a --memcpy-gib buffer into a pre-touched one (one thread);
  preload   build/server/tensorcompute-server --device=cpu --preload=t=FILE: the time from
            start to its "listening on" line (printed once Start has returned, after health
            turned SERVING), the "preloaded t from ... in X s" line's X, and its peak RSS
            (VmHWM) then;
  put       a server with nothing preloaded (the same --max_resident_bytes), `tensorcompute put
            t --input FILE` against it as a child (wall time; its peak RSS from /usr/bin/time,
            else os.wait4's, which counts this script's own peak too), then
            `tensorcompute delete t`; and in the same server the ceiling, put_stream_bench
            (tests/bench/put_stream_bench.cc): a bare gRPC client stream of the same bytes in
            the same --chunk-bytes messages. An untimed ceiling upload goes first (a fresh
            server faults in the table's pages on its first upload, whichever client sends
            it); then the two, alternating which goes first; put / ceiling is the median of
            the per-repeat ratios.
GB/s are 10^9 bytes per second; cat's count the file's bytes, the others the table's.

Memory: before each step the script reads MemAvailable and skips the step (saying why) when
it would need more than MemAvailable - 2 GiB: the table plus 256 MiB for a server, twice the
memcpy buffer, and for put also the CLI's peak RSS, estimated as --cli-rss-factor times the
table until a put has been measured, then as the largest measured peak / table so far.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_server import REPO, ServerProcess, use_build

GIB, MIB = 1 << 30, 1 << 20
DIM = 256                 # float32 columns: rows of 1 KiB
BLOCK_ROWS = 1 << 16      # 64 MiB per write
SERVER_SLACK = 256 * MIB  # a server's own memory beside its table: binary, threads, allocator
HEADROOM = 2 * GIB        # what every step leaves of MemAvailable
NAME = "t"
TIME = "/usr/bin/time"


def meminfo():
    """/proc/meminfo's fields, in bytes."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024
    return fields


def fits(need, what):
    """None if `need` bytes leave HEADROOM of MemAvailable, else why `what` is skipped."""
    available = meminfo()["MemAvailable"]
    if need <= available - HEADROOM:
        return None
    why = (f"{what} needs about {need / GIB:.1f} GiB, over MemAvailable "
           f"{available / GIB:.1f} GiB - {HEADROOM // GIB} GiB")
    print(f"  skipped: {why}", file=sys.stderr, flush=True)
    return why


def cached_fraction(path):
    """The share of `path` in the page cache (fincore), or None without fincore."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True,
                         text=True, check=True).stdout
    return min(1.0, int(out.split()[0]) / max(1, os.path.getsize(path)))


def make_table(directory, rows):
    """The path of a float32 [rows, DIM] .npy in `directory` (row r, column c: r + c / DIM in
    float32), written now unless a valid one is there."""
    path = os.path.join(directory, f"table-{rows}x{DIM}-f32.npy")
    if os.path.exists(path):
        try:
            table = np.load(path, mmap_mode="r")
            if table.shape == (rows, DIM) and table.dtype == np.float32:
                return path
        except ValueError:
            pass
    os.makedirs(directory, exist_ok=True)
    need = rows * DIM * 4 + GIB
    free = shutil.disk_usage(directory).free
    if need > free:
        sys.exit(f"{directory}: {need / GIB:.1f} GiB needed for the table, {free / GIB:.1f} free")
    print(f"writing {path} ({rows * DIM * 4 / GIB:g} GiB)", file=sys.stderr, flush=True)
    columns = np.arange(DIM, dtype=np.float32) / DIM
    partial = path + ".part"
    with open(partial, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
                "shape": (rows, DIM)})
        for begin in range(0, rows, BLOCK_ROWS):
            end = min(rows, begin + BLOCK_ROWS)
            (np.arange(begin, end, dtype=np.float32)[:, None] + columns).tofile(f)
    table = np.load(partial, mmap_mode="r")
    last = np.float32(rows - 1) + columns
    if table.shape != (rows, DIM) or table.dtype != np.float32 or \
            not np.array_equal(table[-1], last):
        sys.exit(f"{partial}: not the table written: {table.dtype} {table.shape}")
    del table
    os.replace(partial, path)
    return path


def run_measured(argv):
    """Runs argv to its end: (wall seconds, peak RSS in KiB, exit code, output). The peak is
    GNU time's %M where /usr/bin/time is: os.wait4's ru_maxrss alone would count this script's
    own peak too (Python starts children with vfork, and a child's maxrss begins at the
    parent's high-water mark), so without it the peak is an upper bound."""
    timed = os.access(TIME, os.X_OK)
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as peak:
        if timed:
            argv = [TIME, "-f", "%M", "-o", peak.name, *argv]
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        peak_kib = int(peak.read().split()[-1]) if timed else usage.ru_maxrss
        return seconds, peak_kib, process.returncode, out.read().decode(errors="replace")


def measure_cat(path):
    size = os.path.getsize(path)
    cached = cached_fraction(path)
    from_disk = size > meminfo()["MemAvailable"] - GIB or (cached is not None and cached < 0.9)
    start = time.perf_counter()
    subprocess.run(f"cat {shlex.quote(path)} > /dev/null", shell=True, check=True)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "gb_per_s": size / seconds / 1e9, "cached": cached,
            "from_disk": from_disk}


def measure_memcpy(nbytes):
    why = fits(2 * nbytes, f"memcpy of {nbytes / GIB:g} GiB")
    if why:
        return {"skipped": why}
    source = np.empty(nbytes, dtype=np.uint8)
    source.fill(1)
    destination = np.empty_like(source)
    destination.fill(0)  # touched, so that the copy measures no page faults
    start = time.perf_counter()
    np.copyto(destination, source)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "gb_per_s": nbytes / seconds / 1e9}


def server_flags(nbytes):
    return ["--device=cpu", f"--max_resident_bytes={nbytes + 64 * MIB}"]


def measure_preload(path, nbytes):
    why = fits(nbytes + SERVER_SLACK, "preload (a server holding the table)")
    if why:
        return {"skipped": why}
    cached = cached_fraction(path)
    start = time.perf_counter()
    with ServerProcess(*server_flags(nbytes), f"--preload={NAME}={path}") as server:
        seconds = time.perf_counter() - start
        peak_kib = server.status_kib("VmHWM")
        logged = [line for line in server.output if f"preloaded {NAME} from" in line]
    if not logged:
        raise RuntimeError(f"no 'preloaded' line in:\n{''.join(server.output)}")
    # "... preloaded t from PATH: B float32 bytes on cpu in X s"
    log_seconds = float(logged[0].rsplit(" in ", 1)[1].split()[0])
    return {"seconds": seconds, "log_seconds": log_seconds, "gb_per_s": nbytes / seconds / 1e9,
            "peak_rss_mib": peak_kib / 1024, "cached": cached}


def cli_put(cli, target, path, chunk_bytes):
    seconds, peak_kib, code, output = run_measured(
        [cli, "put", NAME, "--input", path, "--chunk-bytes", str(chunk_bytes), "--target",
         target, "--timeout", "86400"])
    if code != 0:
        raise RuntimeError(f"tensorcompute put exited {code}:\n{output[-2000:]}")
    deleted = subprocess.run([cli, "delete", NAME, "--target", target], capture_output=True,
                             text=True)
    if deleted.returncode != 0:
        raise RuntimeError(f"tensorcompute delete exited {deleted.returncode}:\n"
                           f"{deleted.stdout}{deleted.stderr}")
    return seconds, peak_kib / 1024


def ceiling(bench, target, nbytes, chunk_bytes):
    out = subprocess.run([bench, f"--target={target}", f"--bytes={nbytes}",
                          f"--chunk_bytes={chunk_bytes}", f"--name={NAME}_ceiling",
                          "--repeats=1"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{bench} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["median_seconds"]


def measure_put(tools, path, nbytes, chunk_bytes, cli_factor, cli_first):
    cli, bench = tools
    why = fits(nbytes + SERVER_SLACK, "put (a server holding the table)")
    if why:
        return {"skipped": why}
    result = {"cached": cached_fraction(path)}
    with ServerProcess(*server_flags(nbytes)) as server:
        # The first upload into a fresh server also pays for faulting in the table's pages
        # (the server's cost, not the client's); an untimed one first, so that both timed
        # uploads find the server as warm as each other.
        ceiling(bench, server.target, nbytes, chunk_bytes)
        for step in (["cli", "ceiling"] if cli_first else ["ceiling", "cli"]):
            if step == "ceiling":
                seconds = ceiling(bench, server.target, nbytes, chunk_bytes)
                result["ceiling_seconds"] = seconds
                result["ceiling_gb_per_s"] = nbytes / seconds / 1e9
                continue
            # The server is empty now (each side deletes its table), so it takes the whole
            # table again, and the CLI its estimate.
            why = fits(nbytes + SERVER_SLACK + int(cli_factor * nbytes),
                       f"tensorcompute put (the server, and the CLI at {cli_factor:.2f}x the "
                       "table)")
            if why:
                result["skipped"] = why
                continue
            seconds, peak_mib = cli_put(cli, server.target, path, chunk_bytes)
            result.update({"seconds": seconds, "gb_per_s": nbytes / seconds / 1e9,
                           "cli_peak_rss_mib": peak_mib})
        result["server_peak_rss_mib"] = server.status_kib("VmHWM") / 1024
    if "seconds" in result:
        result["vs_ceiling"] = result["gb_per_s"] / result["ceiling_gb_per_s"]
    return result


def median(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def cell(value, form):
    """`value` formatted as `form` (and a unit after a space), or "skipped" if None."""
    spec, _, unit = form.partition(" ")
    return "skipped" if value is None else format(value, spec) + (f" {unit}" if unit else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-gib", default="1,4,16",
                        help="table sizes in GiB, comma-separated (fractions allowed)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="/var/tmp/tc-loading",
                        help="where the tables are written, and kept for later runs")
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--bench-bin", default=None,
                        help="put_stream_bench (default: BUILD/tests/bench/put_stream_bench)")
    parser.add_argument("--chunk-bytes", type=int, default=MIB,
                        help="tensor bytes per message, for put and the ceiling alike")
    parser.add_argument("--memcpy-gib", type=float, default=1)
    parser.add_argument("--cli-rss-factor", type=float, default=2.0,
                        help="the CLI's peak RSS per table byte assumed before one is measured")
    parser.add_argument("--json", help="also write every measurement here")
    args = parser.parse_args()
    cli = use_build(args.build)
    bench = args.bench_bin or os.path.join(args.build, "tests", "bench", "put_stream_bench")
    for binary in (os.environ["TC_SERVER_BINARY"], cli, bench):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not built")
    memcpy_bytes = int(args.memcpy_gib * GIB)
    cli_factor = args.cli_rss_factor

    sizes = []
    for text in args.sizes_gib.split(","):
        rows = int(round(float(text) * GIB / (DIM * 4)))
        if rows <= 0:
            sys.exit(f"--sizes-gib: {text} is under one row")
        sizes.append((f"{float(text):g} GiB", rows))
    results = []
    for label, rows in sizes:
        nbytes = rows * DIM * 4
        path = make_table(args.dir, rows)
        print(f"{label}: warming the page cache", file=sys.stderr, flush=True)
        measure_cat(path)
        runs = {"cat": [], "memcpy": [], "preload": [], "put": []}
        for repeat in range(args.repeats):
            runs["cat"].append(measure_cat(path))
            runs["memcpy"].append(measure_memcpy(memcpy_bytes))
            runs["preload"].append(measure_preload(path, nbytes))
            runs["put"].append(measure_put((cli, bench), path, nbytes, args.chunk_bytes,
                                           cli_factor, cli_first=repeat % 2 == 0))
            pre, put = runs["preload"][-1], runs["put"][-1]
            print(f"  {label} #{repeat + 1}: cat {runs['cat'][-1]['gb_per_s']:.2f} GB/s, "
                  f"preload {cell(pre.get('seconds'), '.2f s')}, put "
                  f"{cell(put.get('seconds'), '.2f s')}, ceiling "
                  f"{cell(put.get('ceiling_seconds'), '.2f s')}", file=sys.stderr, flush=True)
        peaks = [r["cli_peak_rss_mib"] * MIB / nbytes for r in runs["put"]
                 if "cli_peak_rss_mib" in r]
        if peaks:
            cli_factor = max(peaks)
        results.append({"size": label, "rows": rows, "bytes": nbytes,
                        "file_bytes": os.path.getsize(path), "runs": runs})

    info = meminfo()
    print(f"Loading a float32 [rows, {DIM}] table: {os.cpu_count()} CPUs, "
          f"MemTotal {info['MemTotal'] / GIB:.1f} GiB; median of {args.repeats}, steps "
          f"interleaved; GB/s = 10^9 B/s; memcpy of {args.memcpy_gib:g} GiB; put and ceiling "
          f"in {args.chunk_bytes} B messages. preload s: start to SERVING (in parentheses, "
          "the log's 'preloaded ... in X s').")
    if not os.access(TIME, os.X_OK):
        print(f"No {TIME}: the CLI's peak RSS is os.wait4's, which counts this script's too.")
    print()
    print("| table | cat GB/s | memcpy GB/s | preload s | preload GB/s | preload / cat |"
          " preload server peak RSS MiB | put s | put GB/s | put CLI peak RSS MiB |"
          " ceiling GB/s | put / ceiling |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for result in results:
        runs = result["runs"]
        cat = median(runs["cat"], "gb_per_s")
        disk = " (from disk)" if any(r["from_disk"] for r in runs["cat"]) else ""
        preload = median(runs["preload"], "gb_per_s")
        log_s = median(runs["preload"], "log_seconds")
        print(f"| {result['size']} | {cat:.2f}{disk}"
              f" | {cell(median(runs['memcpy'], 'gb_per_s'), '.2f')}"
              f" | {cell(median(runs['preload'], 'seconds'), '.2f')}"
              f"{'' if log_s is None else f' ({log_s:.1f})'}"
              f" | {cell(preload, '.2f')}"
              f" | {cell(None if preload is None else preload / cat, '.2f')}"
              f" | {cell(median(runs['preload'], 'peak_rss_mib'), ',.0f')}"
              f" | {cell(median(runs['put'], 'seconds'), '.2f')}"
              f" | {cell(median(runs['put'], 'gb_per_s'), '.2f')}"
              f" | {cell(median(runs['put'], 'cli_peak_rss_mib'), ',.0f')}"
              f" | {cell(median(runs['put'], 'ceiling_gb_per_s'), '.2f')}"
              f" | {cell(median(runs['put'], 'vs_ceiling'), '.2f')} |")
        for step in ("memcpy", "preload", "put"):
            for why in sorted({r["skipped"] for r in runs[step] if "skipped" in r}):
                notes.append(f"{result['size']} {step}: {why}")
        cached = {step: median(runs[step], "cached") for step in ("cat", "preload", "put")}
        if all(v is not None for v in cached.values()):
            notes.append(f"{result['size']}: file in the page cache before cat / preload / put "
                         f"(median): {cached['cat']:.0%} / {cached['preload']:.0%} / "
                         f"{cached['put']:.0%}")
    if notes:
        print()
        for note in notes:
            print(f"- {note}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpus": os.cpu_count(), "mem_total": info["MemTotal"],
                       "memcpy_bytes": memcpy_bytes, "chunk_bytes": args.chunk_bytes,
                       "repeats": args.repeats, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
