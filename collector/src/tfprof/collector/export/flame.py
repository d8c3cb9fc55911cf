"""Flame graphs of GPU time by Python stack (docs/guides/code-view.md, "Flame graphs"):
speedscope's JSON file format, and collapsed stacks for flamegraph.pl and inferno.

- **speedscope** (``speedscope.app``, or its npm package offline): ``sampled`` profiles
  over shared frames, one per job and rank: GPU time (a sample per launching stack,
  weighted by the GPU nanoseconds it launched) and, where the sampler ran, host time (a
  sample per stack, weighted by the sampled threads' nanoseconds there). Frames are named
  ``function (file:line)``, with ``file`` and ``line`` for speedscope's details panel.
- **collapsed**: one line per stack, ``job;task T;frame;...;frame NANOSECONDS`` (GPU
  time), frames as ``file:line:function``.

GPU work no stack was found for is the stack ``(no Python stack)``, so a profile's
total is the GPU time of its job and rank.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

from tfprof.collector.analysis.code_read import Attribution, by_group
from tfprof.collector.analysis.code_tree import GPU_NS, HOST_NS, NO_STACK, Leaf
from tfprof.core.version import __version__

FLAME_FORMATS = ("speedscope", "collapsed")
# Longest first, as export's own suffixes.
FLAME_SUFFIXES = ((".speedscope.json", "speedscope"), (".collapsed", "collapsed"),
                  (".folded", "collapsed"))  # fmt: skip
SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def flame_format(output: str, named: str | None) -> str | None:
    """The flame format of ``--format`` or of the output's suffix; None: a timeline."""
    if named:
        return named if named in FLAME_FORMATS else None
    base = os.path.basename(output).lower()
    return next((fmt for suffix, fmt in FLAME_SUFFIXES if base.endswith(suffix)), None)


def _rank(task: str) -> str:
    return f"task {task}" if task else "process"


class _Frames:
    def __init__(self, att: Attribution) -> None:
        self.att = att
        self.index: dict[str, int] = {}
        self.frames: list[dict[str, Any]] = []

    def of(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            file, line, function = self.att.frames.get(name, ("", 0, name))
            frame: dict[str, Any] = {"name": name}
            if file and line:  # the name is short_file:line:function
                short = name[: -len(f":{line}:{function}")]
                frame = {"name": f"{function} ({short}:{line})", "file": file, "line": line}
            found = self.index[name] = len(self.frames)
            self.frames.append(frame)
        return found


def _profile(name: str, leaves: Sequence[Leaf], column: int, frames: _Frames) -> dict[str, Any]:
    merged: dict[tuple[int, ...], int] = {}
    for leaf in leaves:
        weight = int(leaf.values[column])
        if weight > 0:
            stack = tuple(frames.of(f) for f in (leaf.path or (NO_STACK,)))
            merged[stack] = merged.get(stack, 0) + weight
    order = sorted(merged)  # root-first paths in order: neighbours in the flame chart
    total = sum(merged.values())
    return {"type": "sampled", "name": name, "unit": "nanoseconds", "startValue": 0,
            "endValue": total, "samples": [list(s) for s in order],
            "weights": [merged[s] for s in order]}  # fmt: skip


def speedscope(att: Attribution) -> dict[str, Any]:
    frames = _Frames(att)
    profiles = []
    for (job, task), leaves in by_group(att):
        for column, what in ((GPU_NS, "GPU time"), (HOST_NS, "host time (sampled threads)")):
            profile = _profile(f"{job} {_rank(task)}: {what}", leaves, column, frames)
            if profile["samples"]:
                profiles.append(profile)
    return {"$schema": SCHEMA, "version": "0.0.1", "name": "GPU time by Python stack",
            "exporter": f"tfprof-collector {__version__}", "activeProfileIndex": 0,
            "shared": {"frames": frames.frames}, "profiles": profiles}  # fmt: skip


def write_speedscope(att: Attribution, out: TextIO) -> int:
    """Writes the file; returns the profiles written."""
    doc = speedscope(att)
    json.dump(doc, out, separators=(",", ":"))
    out.write("\n")
    return len(doc["profiles"])


def write_collapsed(att: Attribution, out: TextIO) -> int:
    """Writes the stacks, GPU nanoseconds each; returns the lines written."""
    merged: dict[tuple[str, ...], int] = {}
    for (job, task), leaves in by_group(att):
        for leaf in leaves:
            ns = int(leaf.values[GPU_NS])
            if ns > 0:
                # ';' separates frames: one inside a name becomes ':'
                path = (job, _rank(task), *(leaf.path or (NO_STACK,)))
                key = tuple(part.replace(";", ":").replace("\n", " ") for part in path)
                merged[key] = merged.get(key, 0) + ns
    for key in sorted(merged):
        out.write(f"{';'.join(key)} {merged[key]}\n")
    return len(merged)
