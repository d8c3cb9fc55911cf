"""The lake's tables: which record kind goes to which table, with which columns and types.

One place maps every record kind to its table and the columns meaningful for it
(``RECORD_TABLES``); the dimension tables (``streams``, ``goodbyes``, ``devices``,
``host_samples``, ``log_state``) are declared beside them. Types are the narrowest that
every value the collector accepts fits (validate.py bounds the 64-bit ones to int64) or
that CUDA itself bounds (block dimensions, registers, CUPTI enums); times and byte counts
are int64.
Names are dictionary-encoded strings resolved from the stream's string table. Copies,
memsets and syncs carry ``name`` and every GPU table ``external_id`` (imported traces
name copies by their TF node, and Kineto gives GPU work the op's External id): files
written before they were added read them as null.

Kernels and markers carry the collective a record ran or issued (Kineto's collective
args): one record column, ``collective``, expanded into the nullable ``collective`` and
``coll_*`` columns (``COLLECTIVE``); null on every record that names none.

Every table is hive-partitioned by ``job`` and ``run`` (strings), which live in the
path, not in the files: ``<lake>/<table>/job=<job>/run=<run>/<segment>.parquet``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from tfprof.core.collectives import FIELDS as COLLECTIVE_FIELDS
from tfprof.core.collectives import lake_column
from tfprof.core.records import RecordKind

NAME = pa.dictionary(pa.int32(), pa.string())
PARTITION = pa.schema([("job", pa.string()), ("run", pa.string())])
# Source columns resolved through the stream's string table rather than copied.
RESOLVED = {"name": "name", "domain": "category", "file": "file", "function": "function"}


@dataclass(frozen=True)
class Column:
    name: str  # in the lake
    type: pa.DataType
    unit: str  # for the lake reference's column list (scripts/gen_reference.py)
    doc: str
    source: str = ""  # the record column it comes from, when not its own name
    # The record column it is one field of (``collective``: several lake columns from
    # one record column); such a column is no record column's lake name.
    expands: str = ""

    @property
    def record_column(self) -> str:
        return self.name if self.expands else self.source or self.name


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def schema(self) -> pa.Schema:
        """The schema written to each file (no partition columns)."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @property
    def full_schema(self) -> pa.Schema:
        """As readers see it: the file columns plus ``job`` and ``run``."""
        return pa.unify_schemas([PARTITION, self.schema])


def _c(name: str, type_: pa.DataType, unit: str, doc: str, source: str = "") -> Column:
    return Column(name, type_, unit, doc, source)


# Identity of the traced process, on every record table (constant within a file, so
# dictionary + run-length encoding makes them nearly free).
IDENTITY = (
    _c("stream_id", NAME, "", "the traced process's stream (unique within a run)"),
    _c("host", NAME, "", "host the process ran on"),
    _c("task", NAME, "", "rank when the job names one, else the pid"),
)
TIMES = (
    _c("start_ns", pa.int64(), "ns since 1970, collector clock",
       "start, with the stream's clock shift applied (see streams.record_shift_ns)"),
    _c("duration_ns", pa.int64(), "ns", "duration"),
)  # fmt: skip
DEVICE = _c("device", pa.uint16(), "", "CUDA device ordinal inside the process")
CONTEXT = _c("context", pa.uint32(), "", "CUDA context id")
STREAM = _c("stream", pa.uint32(), "", "CUDA stream id")
CORRELATION = _c("correlation", pa.uint32(), "", "CUPTI correlation id (API call <-> activity)")
BYTES = _c("bytes", pa.int64(), "bytes", "bytes moved or set")
THREAD = _c("thread", pa.int64(), "", "OS thread id of the host thread")
EXTERNAL = _c("external_id", pa.int64(), "", "framework correlation (Kineto External id); 0 none")
NAME_COL = _c("name", NAME, "", "name from the stream's string table")

# The collective's arguments (tfprof.core.collectives), as Kineto names them.
_COLLECTIVE_TYPES = {"str": NAME, "int": pa.int64(), "ranks": pa.list_(pa.int32())}
_COLLECTIVE_DOCS = {
    "collective": ("", "collective (Kineto 'Collective name': allreduce, broadcast, "
                   "all_to_all...); null: none"),
    "in_nelems": ("elements", "input message elements ('In msg nelems')"),
    "out_nelems": ("elements", "output message elements ('Out msg nelems')"),
    "group_size": ("ranks", "ranks in the process group ('Group size')"),
    "dtype": ("", "element type ('dtype': Float, Half, BFloat16...)"),
    "pg_name": ("", "process group name ('Process Group Name')"),
    "pg_desc": ("", "process group description ('Process Group Description')"),
    "pg_ranks": ("", "global ranks of the process group ('Process Group Ranks')"),
    "seq": ("", "the call's sequence number in its process group ('Seq', newer Kineto)"),
}  # fmt: skip
COLLECTIVE = tuple(
    Column(lake_column(f.key), _COLLECTIVE_TYPES[f.kind], *_COLLECTIVE_DOCS[f.key],
           expands="collective")
    for f in COLLECTIVE_FIELDS
)  # fmt: skip

RECORD_TABLES: dict[RecordKind, Table] = {
    RecordKind.KERNEL: Table("kernels", "GPU kernels", (
        *IDENTITY, *TIMES, DEVICE, CONTEXT, STREAM, CORRELATION, NAME_COL,
        _c("grid_x", pa.uint32(), "blocks", "grid size"),
        _c("grid_y", pa.uint16(), "blocks", "grid size"),
        _c("grid_z", pa.uint16(), "blocks", "grid size"),
        _c("block_x", pa.uint16(), "threads", "block size"),
        _c("block_y", pa.uint16(), "threads", "block size"),
        _c("block_z", pa.uint16(), "threads", "block size"),
        _c("registers", pa.uint16(), "per thread", "registers per thread"),
        _c("static_smem", pa.uint32(), "bytes", "static shared memory per block"),
        _c("dynamic_smem", pa.uint32(), "bytes", "dynamic shared memory per block"),
        EXTERNAL, *COLLECTIVE,
    )),
    RecordKind.MEMCPY: Table("copies", "memory copies", (
        *IDENTITY, *TIMES, DEVICE, CONTEXT, STREAM, CORRELATION, BYTES,
        _c("copy_kind", pa.uint8(), "", "CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD...)"),
        _c("src_kind", pa.uint8(), "", "CUpti_ActivityMemoryKind of the source"),
        _c("dst_kind", pa.uint8(), "", "CUpti_ActivityMemoryKind of the destination"),
        _c("dst_device", pa.uint16(), "", "peer copies: destination device ordinal"),
        NAME_COL, EXTERNAL,
    )),
    RecordKind.MEMSET: Table("memsets", "memory sets", (
        *IDENTITY, *TIMES, DEVICE, CONTEXT, STREAM, CORRELATION, BYTES,
        _c("memory_kind", pa.uint8(), "", "CUpti_ActivityMemoryKind set", source="src_kind"),
        NAME_COL, EXTERNAL,
    )),
    RecordKind.SYNC: Table("syncs", "host waits on the GPU (CUPTI SYNCHRONIZATION)", (
        *IDENTITY, *TIMES, DEVICE, CONTEXT,
        _c("stream", pa.uint32(), "", "CUDA stream id; 4294967295: context-wide"),
        CORRELATION,
        _c("sync_type", pa.uint8(), "", "CUpti_ActivitySynchronizationType"),
        NAME_COL, EXTERNAL,
    )),
    RecordKind.API: Table("api_calls", "CUDA runtime and driver API calls", (
        *IDENTITY, *TIMES, THREAD, CORRELATION, NAME_COL,
        _c("cbid", pa.uint16(), "", "CUPTI callback id"),
        _c("return_value", pa.int32(), "", "CUresult / cudaError_t returned"),
        _c("category", pa.uint8(), "", "1 runtime, 2 driver"),
        EXTERNAL,
    )),
    RecordKind.MARKER: Table("markers", "host ranges: NVTX, framework ops, annotations", (
        *IDENTITY, *TIMES, THREAD, NAME_COL, EXTERNAL,
        _c("domain", NAME, "", "NVTX domain or framework category", source="category"),
        # A range without a thread (Kineto's gpu_user_annotation) lies on a GPU stream.
        _c("device", pa.uint16(), "", "CUDA device ordinal of a range on a GPU stream "
           "(thread 0); 0 otherwise, and in files written before it"),
        _c("stream", pa.uint32(), "", "CUDA stream id of a range on a GPU stream (thread "
           "0); 0 otherwise, and in files written before it"),
        *COLLECTIVE,
    )),
    RecordKind.MEMORY: Table("memory", "device allocations and frees (CUPTI MEMORY2)", (
        *IDENTITY, *TIMES, DEVICE, CONTEXT, STREAM, BYTES,
        _c("address", pa.int64(), "", "device address of the block"),
        _c("memory_op", pa.uint8(), "", "1 allocation, 2 release"),
        _c("correlation", pa.uint32(), "", "CUPTI correlation id of the API call that "
           "allocated or freed it (api_calls.correlation); null in files written before it"),
    )),
    RecordKind.STEP: Table("steps", "training steps the hook marked with no code change "
                           "(PyTorch optimizer steps, Keras train-function calls)", (
        *IDENTITY, *TIMES, THREAD,
        _c("step", pa.int64(), "", "the step's number in its process (steps begun before "
           "it; a Keras call of steps_per_execution k spans k numbers)", source="external_id"),
        _c("name", NAME, "", "what marked it: torch.optim (PyTorch's optimizer-step hook), "
           "keras (the model's train function)"),
    )),
}  # fmt: skip

HOST_SAMPLES = Table("host_samples", "CPU, memory, threads, I/O of each traced process", (
    *IDENTITY,
    _c("time_ns", pa.int64(), "ns since 1970, collector clock", "when the sample was taken"),
    _c("cpu_percent", pa.float32(), "%", "CPU use since the previous sample"),
    _c("rss_bytes", pa.int64(), "bytes", "resident memory"),
    _c("threads", pa.uint32(), "", "thread count"),
    _c("read_bytes", pa.int64(), "bytes", "bytes read so far"),
    _c("write_bytes", pa.int64(), "bytes", "bytes written so far"),
))  # fmt: skip
# Python stacks (docs/concepts/code-attribution.md): a prefix tree per stream, and samples.
STACKS = Table("stacks", "Python stacks of each traced process, as a prefix tree: one row "
               "per stack, named by its innermost frame and the stack it extends", (
    *IDENTITY,
    _c("stack_id", pa.uint32(), "", "the stack's id within its stream (stack_samples.stack_id)"),
    _c("parent_id", pa.uint32(), "", "the stack without its innermost frame; 0: none (the "
       "frame is outermost)"),
    _c("depth", pa.uint16(), "frames", "frames in the stack (1: one); 0: its parent is unknown"),
    _c("frame_id", pa.uint32(), "", "the innermost frame's id within its stream"),
    _c("file", NAME, "", "that frame's file (<redacted> where --redact matched)"),
    _c("line", pa.uint32(), "", "its line: the one executing (live stacks), the function's "
       "first (stacks replayed from Kineto traces)"),
    _c("function", NAME, "", "its function (the qualified name on Python 3.11+)"),
    _c("first_line", pa.uint32(), "", "the function's first line (with file and function, "
       "its code)"),
))  # fmt: skip
STACK_SAMPLES = Table("stack_samples", "Python stack samples: what each thread ran (the "
                      "sampler) and which stack launched GPU work (launch captures)", (
    *IDENTITY,
    _c("time_ns", pa.int64(), "ns since 1970, collector clock", "when the stack was seen"),
    THREAD,
    _c("stack_id", pa.uint32(), "", "the stack (stacks.stack_id of the same stream)"),
    _c("kind", pa.uint8(), "", "1 a sample of the sampler thread, 2 a launch capture"),
    _c("correlation", pa.uint32(), "", "launch captures: the CUPTI correlation id of the "
       "launch (api_calls, kernels, copies, memsets); 0 for samples"),
))  # fmt: skip
STREAMS = Table("streams", "one row per traced process (its hello)", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("collector", pa.string(), "", "id of the collector that wrote it"),
    _c("host", pa.string(), "", "host"),
    _c("task", pa.string(), "", "rank, else the pid"),
    _c("pid", pa.uint32(), "", "process id"),
    _c("ppid", pa.uint32(), "", "parent process id"),
    _c("argv", pa.list_(pa.string()), "", "command line"),
    _c("source", pa.string(), "", "tracer source: cupti, replay:<file>, none"),
    _c("agent_version", pa.string(), "", "agent version"),
    _c("record_shift_ns", pa.int64(), "ns", "added to raw record times to reach the "
       "collector clock (later clock updates add their own delta)"),
    _c("host_shift_ns", pa.int64(), "ns", "added to raw host-sample times"),
    _c("clock_rtt_ns", pa.int64(), "ns", "round trip of the clock estimate"),
))  # fmt: skip
GOODBYES = Table("goodbyes", "one row per stream that ended cleanly", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("records_sent", pa.int64(), "records", "records the agent sent"),
    _c("dropped_queue", pa.int64(), "records", "lost in the hook's queue"),
    _c("dropped_tracer", pa.int64(), "records", "lost by CUPTI"),
    _c("dropped_relay", pa.int64(), "records", "lost between hook and collector"),
    _c("exit_code", pa.int32(), "", "the process's exit status"),
    _c("dropped_stack_samples", pa.int64(), "samples",
       "Python stack samples lost between hook and collector"),
))  # fmt: skip
DEVICES = Table("devices", "one row per stream and device it reported", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("host", pa.string(), "", "host"),
    _c("ordinal", pa.uint16(), "", "CUDA ordinal inside the process"),
    _c("uuid", pa.string(), "", "physical GPU identity"),
    _c("name", pa.string(), "", "GPU model"),
    _c("pci_bus_id", pa.string(), "", "PCI bus id"),
    _c("compute_capability_major", pa.uint8(), "", "compute capability"),
    _c("compute_capability_minor", pa.uint8(), "", "compute capability"),
    _c("sm_count", pa.uint16(), "", "streaming multiprocessors"),
    _c("memory_bytes", pa.int64(), "bytes", "device memory"),
))  # fmt: skip

# A damaged byte range of a stream's batches.log (tfprof.core.batchlog.Damage).
DAMAGE = pa.struct([("offset", pa.int64()), ("bytes", pa.int64()), ("reason", pa.string())])
LOG_STATE = Table("log_state", "one row per stream whose log says more than its records "
                  "(only such streams have one)", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("dropped_queue", pa.int64(), "records", "lost in the hook's queue so far (the count "
       "the latest batch carried; a goodbye's own count is in goodbyes)"),
    _c("lost_records", pa.int64(), "records",
       "records in the damaged entries; null: unknown"),
    _c("damage", pa.list_(DAMAGE), "bytes", "byte ranges of batches.log that compaction "
       "skipped: offset, bytes, reason (checksum mismatch, torn tail)"),
    _c("goodbye_unreadable", pa.bool_(), "", "goodbye.pb could not be parsed: the stream "
       "counts as unfinished"),
))  # fmt: skip

CAPTURE_WINDOWS = Table("capture_windows", "one row per window of time a stream was traced "
                        "in (analyses count only captured time)", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("mode", pa.string(), "", "always (the stream's span: traced throughout), on-demand "
       "or periodic:ON/EVERY (windows as the hook opened and closed them; on-demand from "
       "the collector's captures for agents that do not report them)"),
    _c("capture_id", pa.string(), "", "the capture that asked for it (on-demand windows "
       "the collector recorded); empty otherwise"),
    _c("start_ns", pa.int64(), "ns since 1970, collector clock", "start"),
    _c("end_ns", pa.int64(), "ns since 1970, collector clock",
       "end (a window still open: the stream's last record end so far)"),
))  # fmt: skip

SEGMENTS = Table("segments", "the lake's own bookkeeping: one row per file a compaction "
                 "published, written after them (readers that cannot read a file say the "
                 "rows it held from here)", (
    _c("stream_id", pa.string(), "", "stream id"),
    _c("data_table", pa.string(), "", "the table the file belongs to"),
    _c("file", pa.string(), "", "the file's name in its partition directory"),
    _c("first_seq", pa.int64(), "", "first batch it holds"),
    _c("last_seq", pa.int64(), "", "last batch it holds"),
    _c("rows", pa.int64(), "rows", "rows it holds"),
    _c("bytes", pa.int64(), "bytes", "its size"),
))  # fmt: skip

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        *RECORD_TABLES.values(),
        HOST_SAMPLES,
        STACKS,
        STACK_SAMPLES,
        STREAMS,
        GOODBYES,
        DEVICES,
        LOG_STATE,
        CAPTURE_WINDOWS,
        SEGMENTS,
    )
}
# Tables with one file per stream, replaced whole when it changes (a device discovered
# late): the rest get one file per compacted range of batches.
PER_STREAM = frozenset(
    {STREAMS.name, GOODBYES.name, DEVICES.name, LOG_STATE.name, CAPTURE_WINDOWS.name}
)
