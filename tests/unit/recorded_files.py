"""The recorded TensorFlow and Kineto trace files the reader tests replay."""

from __future__ import annotations

TF_FILES = [
    "GPU_timeline_01.json",
    "GPU_timeline_02_step_0.json",
    "GPU_timeline_02_step_1.json",
    "GPU_timeline_02_step_2.json",
    "GPU_timeline_03_merged_5_runs.json",
]


KINETO_FILES = ["event_sync_multi_stream.json.gz", "simple_add.json.gz"]
