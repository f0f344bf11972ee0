"""The last test of every ctest run (the cleanup of the fixture tc_no_leftovers, which every
test requires): no process that a test started is still alive. Such a process is one whose
executable lies in this build tree (a server, the CLI, a test binary, a fuzzer), or an edge
(nginx) whose prefix is a test's folder ("tc-edge-", tests/testing/edge_process.py).
Each one found is named (pid, age, command line) and killed, and the run fails.

    python3 tests/tools/leftovers.py BUILD_DIR      (exit 0: none; 1: some, now killed)
"""

import os
import signal
import sys
import time


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def ancestors():
    """This process and its parents: ctest, a shell, whatever ran it."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return pids


def age_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def leftovers(build_dir):
    """(pid, age in s, command line) of each process left behind, and of their children (an
    edge's workers)."""
    build_dir = os.path.realpath(build_dir) + os.sep
    mine = ancestors()
    processes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        pid = int(entry)
        try:
            exe = os.path.realpath(os.readlink(f"/proc/{pid}/exe"))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            processes[pid] = (exe, argv, parent(pid), age_s(pid))
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    left = {pid for pid, (exe, argv, _, _) in processes.items()
            if exe.startswith(build_dir)
            or (os.path.basename(exe) == "nginx" and any("tc-edge-" in a for a in argv))}
    left |= {pid for pid, (_, _, ppid, _) in processes.items() if ppid in left}
    return [(pid, processes[pid][3], " ".join(processes[pid][1])) for pid in sorted(left)]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: leftovers.py BUILD_DIR")
    found = leftovers(sys.argv[1])
    if not found:
        print("leftovers: no process started by a test is alive")
        return 0
    print(f"leftovers: {len(found)} process(es) started by tests are still alive; killing them:")
    for pid, age, command in found:
        print(f"  pid {pid}, {age:.0f} s old: {command}")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
    return 1


if __name__ == "__main__":
    sys.exit(main())
