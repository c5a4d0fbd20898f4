"""Ctrl-C (SIGINT) during a long capture stops it cleanly: the call or the
iteration raises KeyboardInterrupt at once, with weir's threads ended."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent(
    """
    import os, sys, threading, time, weir
    what, trace = sys.argv[1], sys.argv[2]
    # Paced at 200 packets/s, the trace would take minutes.
    runs = {
        "count": lambda: weir.count(trace, pps=200),
        "packets": lambda: sum(1 for _ in weir.packets(trace, pps=200)),
        "flows": lambda: weir.flows(trace, pps=200, queues=2),
        "streams": lambda: sum(1 for _ in weir.streams(trace, pps=200)),
        # A FIFO whose writer stays silent: the wait is for its header.
        "fifo": lambda: weir.count(fifo),
    }
    if what == "fifo":
        fifo = trace + ".fifo"
        os.mkfifo(fifo)
        writer = os.open(fifo, os.O_RDWR)
    tasks = len(os.listdir("/proc/self/task"))
    print("started", flush=True)
    t = time.monotonic()
    try:
        runs[what]()
        print("finished", flush=True)
    except KeyboardInterrupt:
        took = time.monotonic() - t
        if what == "fifo":
            # The read-ahead thread sits in its read until the writer sends or goes.
            os.close(writer)
        # weir's capture threads and workers are joined before the exception
        # comes; a trace's read-ahead thread is told to stop and ends by itself
        # (it is not joined: on a pipe it may sit in a read), at its next block.
        for _ in range(100):
            left = len(os.listdir("/proc/self/task")) - tasks
            if left == 0:
                break
            time.sleep(0.01)
        print(f"interrupted {took:.2f} {left}", flush=True)
    """
)


@pytest.mark.parametrize("what", ["count", "packets", "flows", "streams", "fifo"])
def test_ctrl_c_stops_a_capture_cleanly(synth, what):
    # A shell that starts a job in the background without job control (as a CI
    # runner may) leaves SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: the child gets the default disposition back.
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, what, synth],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout.readline().strip() == "started"
    time.sleep(0.8)
    child.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        # Not stopped by the signal: end it, and fail saying so.
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"SIGINT did not stop weir.{what}: still running 30 s later\n{out}{err}")
    waited = time.monotonic() - sent
    assert child.returncode == 0, err
    words = out.split()
    assert words[0] == "interrupted", out + err
    assert words[2] == "0", f"threads left running after the interrupt: {out}"
    # Stopping asks the capture to end within ~50 ms; a loaded machine may take longer.
    assert waited < 5.0, f"{waited:.2f} s from SIGINT to the end"
