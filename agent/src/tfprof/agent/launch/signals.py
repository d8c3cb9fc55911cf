"""The launcher's signals: what it forwards to the job, and the thread that does it.

The launcher blocks the forwarded signals in every thread (``block_signals``, before it
starts any) and takes them in one thread with sigwaitinfo, which tells who sent each one:
a Ctrl-C from the terminal already reached the job (same process group) and is not sent
twice; a ``kill`` aimed at the launcher is forwarded.
"""

from __future__ import annotations

import os
import signal
import threading

# USR1/USR2 too: batch schedulers (SLURM's --signal) warn jobs of preemption with them.
FORWARDED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
SI_KERNEL = 0x80  # si_code of signals the kernel sends, e.g. the tty's Ctrl-C


def block_signals() -> None:
    """Block forwarded signals in this thread (and so in every thread started later)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)


class SignalForwarder:
    """Forwards the signals the launcher receives to the job ``pid`` until it is reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        # Set once the job is reaped: its pid may be reused, so nothing is sent after.
        self.reaped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfprof-signals", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            info = signal.sigwaitinfo(FORWARDED_SIGNALS)
            from_tty = info.si_code == SI_KERNEL and info.si_signo in (
                signal.SIGINT,
                signal.SIGQUIT,
            )
            if self.reaped.is_set():
                continue  # the job is gone; the launcher finishes within its timeouts
            try:
                if from_tty and os.getpgid(self.pid) == os.getpgrp():
                    continue  # the terminal delivered it to the job already
                os.kill(self.pid, info.si_signo)
            except ProcessLookupError:
                continue
