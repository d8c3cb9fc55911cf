"""The pieces issue 23's defences are made of, each on its own: argv redaction, scoped
tokens, the rate-limited log, frames split to the relay's limit, run owners, a batch's
decoded size, which listen addresses other hosts reach."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tfprof.agent.inprocess import frames
from tfprof.agent.relay.run_owners import RunOwners
from tfprof.collector.service.auth import Authorizer
from tfprof.collector.service.exposure import reachable_from_others
from tfprof.collector.service.stream_call import decoded_bytes
from tfprof.collector.service.tokens import Scope, mint, verify
from tfprof.core.ratelimit import RateLimitedLog
from tfprof.core.records import NUM_COLUMNS, RecordTable
from tfprof.core.redact import patterns_from, redact_argv
from tfprof.proto import collector_pb2 as pb

KEY = b"k" * 32


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train.py", "--api-key=SECRET123"], ["train.py", "--api-key=***"]),
        (["train.py", "--password", "hunter2", "--lr", "0.1"],
         ["train.py", "--password", "***", "--lr", "0.1"]),
        (["x", "DB_PASSWD=p4ss", "AUTH_TOKEN=t"], ["x", "DB_PASSWD=***", "AUTH_TOKEN=***"]),
        (["x", "--data", "s3://user:pw@bucket/path"], ["x", "--data", "s3://user:***@bucket/path"]),
        (["x", "--secret", "--verbose"], ["x", "--secret", "--verbose"]),  # no value follows
        (["python", "-c", "print('key=1')", "--epochs=3"],
         ["python", "-c", "print('key=1')", "--epochs=3"]),
    ],
)  # fmt: skip
def test_argv_secrets_are_masked(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_more_patterns_add_to_the_defaults() -> None:
    patterns = patterns_from(["wandb, Cookie", ""])
    assert "key" in patterns and "wandb" in patterns and "cookie" in patterns
    assert redact_argv(["--wandb-entity=me", "--Cookie", "c"], patterns) == [
        "--wandb-entity=***", "--Cookie", "***",
    ]  # fmt: skip


def test_a_scoped_token_says_only_what_its_key_signed() -> None:
    token = mint(KEY, "job", "resnet")
    assert verify(KEY, token) == Scope("job", "resnet")
    assert verify(b"x" * 32, token) is None  # another collector's key
    forged = token.replace(":job:resnet:", ":job:bert:")
    assert verify(KEY, forged) is None  # the name is signed with the rest
    assert verify(KEY, token.replace(":job:", ":node:")) is None
    with pytest.raises(ValueError):
        mint(KEY, "job", "a:b")


def test_scopes_allow_their_own_streams_only() -> None:
    job, node = Scope("job", "resnet"), Scope("node", "gpu-07")
    assert job.allows_stream("resnet", "any") is None
    assert "not bert" in (job.allows_stream("bert", "any") or "")
    assert node.allows_stream("bert", "gpu-07") is None
    assert "not gpu-08" in (node.allows_stream("bert", "gpu-08") or "")
    assert Scope("admin").allows_stream("x", "y") is None


def test_the_authorizer_tells_fleet_from_scoped_tokens() -> None:
    auth = Authorizer("fleet-token", KEY)
    assert auth.check("Bearer fleet-token") == (Scope("admin"), "")
    assert auth.check(f"Bearer {mint(KEY, 'node', 'n1')}")[0] == Scope("node", "n1")
    scope, why = auth.check("Bearer nope")
    assert scope is None and "invalid" in why
    assert auth.check(None)[0] is None
    assert Authorizer().check(None) == (Scope("open"), "")


def test_a_rate_limited_log_writes_one_line_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limited = RateLimitedLog(logging.getLogger("tfprof.test"), interval_s=10.0)
    with caplog.at_level(logging.WARNING, logger="tfprof.test"):
        assert limited.note("refused a", now=100.0)
        assert not any(limited.note(f"refused {i}", now=101.0) for i in range(49))
        assert limited.note("refused b", now=111.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused a", "refused b (50 like it in the last 10 s, 51 in all)"]
    assert limited.total == 51


def test_a_big_table_goes_as_frames_under_the_relay_limit() -> None:
    n = frames.MAX_FRAME_RECORDS * 2 + 5
    table = RecordTable()
    for i in range(n):
        table.append([1, i, 1] + [0] * (NUM_COLUMNS - 3))
    names = ["k" * 1000 for _ in range(9000)]  # more names than half a frame holds
    out = frames.encode_records_frames(table, 1, names, 7)
    assert sum(records for _, records in out) == n
    seen_names: list[str] = []
    starts: list[int] = []
    for frame, records in out:
        kind, length = frames.HEADER.unpack_from(frame)
        assert kind == frames.FrameType.RECORDS and length <= frames.MAX_FRAME_BYTES
        decoded = frames.decode_records(memoryview(frame)[frames.HEADER.size :])
        assert decoded.count == records and decoded.dropped == 7
        assert decoded.string_base == 1 + len(seen_names)
        seen_names += decoded.strings
        width = 8 * decoded.count
        starts += frames.int64_values(decoded.column_data[width : 2 * width])
    assert seen_names == names and starts == list(range(n))


def test_a_run_belongs_to_the_uid_of_its_first_process(tmp_path: Path) -> None:
    owners = RunOwners(tmp_path, root_may_join=True)
    assert owners.claim("resnet", "r1", 1000) is None
    assert owners.claim("resnet", "r1", 1000) is None  # a second rank of the same user
    assert owners.claim("resnet", "r1", 1001) == 1000  # another user
    assert owners.claim("resnet", "r1", 0) is None  # root, allowed here
    assert oct((tmp_path / "owners.json").stat().st_mode & 0o777) == "0o600"
    again = RunOwners(tmp_path, root_may_join=False)  # a restarted daemon remembers
    assert again.claim("resnet", "r1", 1001) == 1000
    assert again.claim("resnet", "r1", 0) == 1000


def test_decoded_size_counts_every_column_of_every_record() -> None:
    batch = pb.Batch(seq=1)
    batch.records.kind.extend([pb.KERNEL] * 1000)  # one column on the wire, thirty in the lake
    batch.strings.extend(["abcd"])
    assert batch.ByteSize() < 3000
    assert decoded_bytes(batch) == 8 * 1000 * len(pb.Records.DESCRIPTOR.fields) + 4


@pytest.mark.parametrize(
    ("listen", "open_to_others"),
    [("127.0.0.1:4317", False), ("localhost:0", False), ("[::1]:4317", False),
     ("0.0.0.0:4317", True), ("[::]:4317", True), (":4317", True), ("10.1.2.3:4317", True)],
)  # fmt: skip
def test_which_listen_addresses_other_hosts_reach(listen: str, open_to_others: bool) -> None:
    assert reachable_from_others(listen) == open_to_others


def test_the_bootstrap_folder_is_readable_by_every_user_whatever_the_umask(
    tmp_path: Path,
) -> None:
    import os
    import stat

    from tfprof.agent.launch.bundle import write_bundle

    before = os.umask(0o077)  # a daemon unit's tight umask
    try:
        write_bundle(str(tmp_path / "bootstrap"))
    finally:
        os.umask(before)
    for dirpath, dirnames, filenames in os.walk(tmp_path / "bootstrap"):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o755
        for name in filenames:
            mode = stat.S_IMODE(os.lstat(os.path.join(dirpath, name)).st_mode)
            assert mode in (0o644, 0o755), (name, oct(mode))
        del dirnames
