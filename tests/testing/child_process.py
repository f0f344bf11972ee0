"""The life of a test's child process (a server, the edge, a CLI): started so that it dies with
the test, its output kept, never blocking it, and an orderly stop.

    process = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    drain = keep_output(process, output)     # a thread appends each line to `output`
    stop(process, drain, timeout=30)         # SIGTERM; SIGKILL after `timeout` s

ctest kills a test that runs past its TIMEOUT with SIGKILL, which leaves no test code to stop
its children: popen asks the kernel to kill the child when the test process dies
(PR_SET_PDEATHSIG), so that nothing a test started outlives it (tests/tools/leftovers.py checks
at the end of every ctest run). util-linux's setpriv sets it and execs the command, so the child
runs no Python between fork and exec: a preexec_fn would make subprocess fork() where it now
uses vfork, and with grpcio's threads alive in the test a forked child can die before its exec
(grpcio's fork handlers, grpc/grpc#43055; CI saw a server "not start" so).
"""

import shutil
import subprocess
import threading

_SETPRIV = shutil.which("setpriv")


def popen(argv, **kwargs):
    """subprocess.Popen(argv, **kwargs), with the child killed when this process dies.
    The kernel ties the child to the thread that starts it, so only children started from the
    main thread (which lives as long as the process) are tied; others, and any child where
    setpriv is missing, are plain Popen."""
    if _SETPRIV and threading.current_thread() is threading.main_thread():
        argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    return subprocess.Popen(argv, **kwargs)


def keep_output(process, output):
    """Reads the rest of `process`'s output into the list `output` on a daemon thread (so that
    a full pipe never stalls the process), and returns the thread."""
    def read():
        for line in process.stdout:
            output.append(line)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def stop(process, drain, timeout):
    """SIGTERM, then SIGKILL if `process` has not exited within `timeout` seconds (the wait's
    TimeoutExpired still propagates, for tests that require a timely exit); then its output."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if drain is not None:
            drain.join(timeout=5)
        process.stdout.close()
