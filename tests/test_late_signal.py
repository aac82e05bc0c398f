"""A served MPI job that stopped cleanly ended with status 15 now and then on a loaded machine:
``mpiexec`` sends its SIGTERM on to every rank, and a rank that rank 0 had already stopped (its
``STOP`` came first) restored its default handlers before the launcher's copy reached it, then
died of that copy (tests/test_server_fronts.py under the local CI, session 55).
:func:`distgrail.mpi.serve.absorb_late_signals` absorbs such a copy for a few seconds, then gives
a signal to the handler the process had before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from distgrail.mpi.serve import absorb_late_signals


def test_a_late_copy_is_absorbed_and_a_later_signal_reaches_the_old_handler():
    seen = []
    before = {signal.SIGTERM: lambda s, f: seen.append(("old", s)), signal.SIGINT: signal.getsignal(signal.SIGINT)}
    saved = {s: signal.getsignal(s) for s in before}
    signal.signal(signal.SIGTERM, before[signal.SIGTERM])
    try:
        absorb_late_signals(before, seconds=0.5)
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's late copy: absorbed
        time.sleep(0.05)
        assert seen == []
        time.sleep(0.6)
        os.kill(os.getpid(), signal.SIGTERM)  # past the window: the old handler, put back
        time.sleep(0.05)
        assert seen == [("old", signal.SIGTERM)]
        assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_process_whose_default_handler_is_back_still_dies_of_a_signal_after_the_window():
    code = textwrap.dedent("""
        import os, signal, time
        from distgrail.mpi.serve import absorb_late_signals
        absorb_late_signals({signal.SIGTERM: signal.SIG_DFL}, seconds=0.3)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        print("survived the late copy", flush=True)
        time.sleep(0.4)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        print("not reached", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout == "survived the late copy\n" and r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr)
