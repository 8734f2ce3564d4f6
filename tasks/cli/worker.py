"""``python -m tasks.cli.worker``: one of the local launcher's reused worker processes
(:class:`tasks.sweeps.worker.WorkerPool` starts it, and its docstring gives the protocol).

It reads jobs from its standard input, one JSON line each (``{"argv": [...], "log": PATH}``), runs ``zoo train``'s
own code (:func:`tasks.cli.main.main`) with ``argv`` in this process, its output (file descriptors 1 and 2) sent to
the run's ``train.log``, and answers the exit status on a line of the standard output it started with. It lives
with the command line because it runs the command line; the sweeps below only name it.
"""

from __future__ import annotations

import json
import os
import sys


def _run_one(argv: list[str], log: str) -> int:
    """Run ``zoo train`` with ``argv`` here, its output appended to ``log``; its exit status (1 for an exception
    ``zoo train`` does not turn into one)."""
    from tasks.cli.main import main

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
    try:
        print(f"zoo worker {os.getpid()}: this run trains in a reused worker process", flush=True)
        code = main(argv)
        return int(code or 0)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # the run's failure: its traceback goes to its log, the worker takes the next run
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def serve() -> None:
    """Answer jobs from standard input until it ends (see the module docstring)."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # fd 1 becomes each run's log; answers go here
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # between runs nothing may write into the answers
    for line in sys.stdin:
        job = json.loads(line)
        replies.write(f"{_run_one(job['argv'], job['log'])}\n")


if __name__ == "__main__":
    serve()
