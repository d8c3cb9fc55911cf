"""`tfprof-agent bundle DIR`: the folder a pod mounts read-only, replaced whole."""

from __future__ import annotations

from pathlib import Path

from tfprof.agent.inprocess.sources.cupti_loading import interpreter_abi
from tfprof.agent.launch import bundle


def test_a_bundle_holds_the_hook_and_says_which_abi_it_lacks(tmp_path: Path) -> None:
    target = tmp_path / "bootstrap"
    target.mkdir()
    (target / "stale.txt").write_text("from an older bundle")
    notes = bundle.write_bundle(str(target), ["cp39"])
    assert sorted(p.name for p in target.iterdir()) == [bundle.LIB_DIR, "sitecustomize.py"]
    assert (target / bundle.LIB_DIR / "tfprof" / "agent" / "inprocess" / "hook.py").is_file()
    assert not any(p.is_symlink() for p in target.rglob("*"))  # copies: no host paths
    (note,) = notes
    assert "cpython-39-" in note and "none for it" in note
    assert [p.name for p in tmp_path.iterdir()] == ["bootstrap"]  # no work folders left


def test_abi_names_expand_wheel_tags_on_this_platform() -> None:
    own = interpreter_abi()
    assert bundle.abi_name(own) == own
    assert bundle.abi_name("cp311").startswith("cpython-311-")
    assert bundle.abi_name("cp313t").startswith("cpython-313t-")
    assert bundle.cupti_path_in("/b").endswith("/b/cupti-python/{abi}")
