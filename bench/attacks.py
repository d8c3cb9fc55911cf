"""Issue 23's attacks, run as real attackers would, against real processes.

Each attack prints what was tried, whether the system held, and the figures that show
it: for the victim, records sent = stored + counted dropped; daemon and collector RSS,
fds and threads; how long a legitimate job took to deliver during the attack. Local
attacks run as a throwaway unprivileged user made for the purpose (useradd, runuser;
removed at the end), the victim's jobs as a second one; network attacks go to
127.0.0.1. Memory attacks run the collector in a real memory cgroup (v2 memory.max or
v1 memory.limit_in_bytes). Each attack stays under about a minute. Needs root.

    python attacks.py                     # every attack
    python attacks.py --only flood,sql    # some of them
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.attack_kit.result import Result

if TYPE_CHECKING:
    from bench.attack_kit.kit import Setup

# The attacks by the name --only takes: (module of attack_kit, function).
ATTACKS: dict[str, tuple[str, str]] = {
    "flood": ("daemon_attacks", "connection_flood"),
    "oversize": ("daemon_attacks", "oversized_header"),
    "bigbatch": ("collector_attacks", "big_batch"),
    "hijack": ("collector_attacks", "stream_hijack"),
    "inject": ("daemon_attacks", "fake_hook_injection"),
    "files": ("store_attacks", "readable_files"),
    "damaged": ("store_attacks", "damaged_segment"),
    "sql": ("store_attacks", "sql_escape"),
    "states": ("store_attacks", "run_states"),
    "litter": ("collector_attacks", "hello_litter"),
    "listener": ("collector_attacks", "open_listener"),
}


# Which item of issue 23 each attack's defence is.
ITEMS = {
    "flood": 2, "oversize": 2, "bigbatch": 2, "hijack": 1, "inject": 1, "files": 4,
    "damaged": 5, "sql": 6, "states": 7, "litter": 7, "listener": 3,
}  # fmt: skip


def attack(name: str) -> Callable[[Setup], Result]:
    """Imported only now: --pythonpath must come first on sys.path for tfprof's imports."""
    module, function = ATTACKS[name]
    found: Callable[[Setup], Result] = getattr(
        importlib.import_module(f"bench.attack_kit.{module}"), function
    )
    return found


DEFAULT_TRACE = "tests/data/traces/tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run issue 23's attacks (daemon socket, collector port, files, sql, "
        "run states) against real tfprof processes and print whether each held.",
        epilog="attacks: " + ", ".join(ATTACKS),
    )
    p.add_argument("--only", default="", help="comma-separated attacks to run (default: all)")
    p.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]),
                   help="the tfprof checkout (for the trace; default: this one)")  # fmt: skip
    p.add_argument("--python", default=sys.executable,
                   help="interpreter that imports tfprof (default: this one)")  # fmt: skip
    p.add_argument(
        "--pythonpath",
        default="",
        help="PYTHONPATH for tfprof processes, e.g. a snapshot's */src folders",
    )
    p.add_argument("--trace", default="", help="trace the jobs replay (default: the repo's)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder under /tmp")
    p.add_argument("--label", default="", help="a line printed first (which code, which machine)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("attacks.py needs root (it creates users and memory cgroups)", file=sys.stderr)
        return 2
    names = [n for n in args.only.split(",") if n] or list(ATTACKS)
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        print(f"unknown attack(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.pythonpath:
        sys.path[:0] = args.pythonpath.split(os.pathsep)
    from bench.attack_kit.kit import scratch

    trace = Path(args.trace or Path(args.repo) / DEFAULT_TRACE)
    if args.label:
        print(args.label)
    results = []
    with scratch(args.python, args.pythonpath, trace, args.keep) as setup:
        print(f"scratch {setup.base}; victim user {setup.victim.name} (uid {setup.victim.uid}), "
              f"attacker user {setup.attacker.name} (uid {setup.attacker.uid}); memory cgroup "
              f"{setup.memory_cgroup or 'none'}", flush=True)  # fmt: skip
        for name in names:
            start = time.monotonic()
            try:
                result = attack(name)(setup)
            except Exception as exc:
                result = Result(name, "(see error)", error=f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
            result.add(f"attack took {time.monotonic() - start:.1f} s")
            print(result.render(), flush=True)
            results.append(result)
    print("\nsummary (issue 23's item in brackets):")
    for name, result in zip(names, results, strict=True):
        verdict = "error" if result.error else "held" if result.held else "NOT held"
        print(f"  [{ITEMS[name]}] {result.name:<58} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
