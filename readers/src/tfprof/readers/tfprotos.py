"""TensorFlow-ecosystem protobuf classes, from the packages that ship them.

The StepStats reader here and the collector's StepStats / XPlane writers use them. They
are imported when first asked for, never at module level (``tfprof.core`` is standard
library only); a missing package is a ``FormatUnavailable`` naming what to install.
Nothing here is vendored or hand-encoded:

- StepStats / RunMetadata come from ``tensorboard.compat.proto`` (TensorBoard ships
  TensorFlow's protos without TensorFlow; the messages are wire- and text-compatible,
  only their package is ``tensorboard``), else from an installed TensorFlow.
- XPlane (``XSpace``) ships with TensorFlow as ``tensorflow/tsl/profiler/protobuf``.
  Importing it the usual way would run TensorFlow's ``__init__`` (seconds, and a
  runtime the collector has no use for), so the generated module is loaded on its own
  from TensorFlow's install directory; it needs only the protobuf runtime. When
  TensorFlow is already imported its own module is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from tfprof.core.errors import FormatUnavailable


@cache
def step_stats() -> tuple[ModuleType, ModuleType]:
    """``(config_pb2, step_stats_pb2)`` with ``RunMetadata`` and ``StepStats``."""
    for package in ("tensorboard.compat.proto", "tensorflow.core.framework"):
        try:
            stats = importlib.import_module(f"{package}.step_stats_pb2")
            config_package = package.replace("framework", "protobuf")
            config = importlib.import_module(f"{config_package}.config_pb2")
        except ImportError:
            continue
        return config, stats
    raise FormatUnavailable(  # tensorboard is the collector's tensorflow-formats extra
        "StepStats needs TensorBoard's protos: pip install tensorboard"
    )


_XPLANE = "tsl/profiler/protobuf/xplane_pb2.py"


@cache
def xplane() -> ModuleType:
    """TensorFlow's ``xplane_pb2`` (``XSpace``, ``XPlane``, ``XLine``, ``XEvent``, ``XStat``)."""
    loaded = sys.modules.get("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    if loaded is not None:
        return loaded
    if "tensorflow" in sys.modules:
        return importlib.import_module("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / _XPLANE
        if path.is_file():
            module_spec = importlib.util.spec_from_file_location("_tfprof_xplane_pb2", path)
            if module_spec is None or module_spec.loader is None:
                continue
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            return module
    raise FormatUnavailable(
        "XPlane export needs TensorFlow's XPlane protos: install TensorFlow "
        "(tensorflow or tensorflow-cpu, 2.16 or later) next to tfprof-agent"
    )
