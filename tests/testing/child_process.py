"""The life of a test's child process (a server, the edge): its output kept, never blocking it,
and an orderly stop.

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    drain = keep_output(process, output)     # a thread appends each line to `output`
    stop(process, drain, timeout=30)         # SIGTERM; SIGKILL after `timeout` s
"""

import threading


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
