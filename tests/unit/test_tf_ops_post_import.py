"""The post-import hook (tfprof.agent.inprocess.post_import) on real modules imported from disk."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tfprof.agent.inprocess import post_import


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("tfprof_watched_")]:
        del sys.modules[name]
    finder = post_import._finder
    if finder is not None:
        sys.meta_path.remove(finder)
        post_import._finder = None


def test_callback_runs_after_the_module_code_once(module_dir: Path) -> None:
    (module_dir / "tfprof_watched_a.py").write_text("READY = True\n")
    seen: list[tuple[str, bool]] = []
    post_import.when_imported(
        "tfprof_watched_a", lambda m: seen.append((m.__name__, getattr(m, "READY", False)))
    )
    assert seen == []
    import tfprof_watched_a  # type: ignore[import-not-found]

    assert seen == [("tfprof_watched_a", True)]
    # The module sees its own loader, and nothing of ours is left on the path.
    assert type(tfprof_watched_a.__loader__).__name__ == "SourceFileLoader"
    assert type(tfprof_watched_a.__spec__.loader).__name__ == "SourceFileLoader"
    assert not any(isinstance(f, post_import.PostImportFinder) for f in sys.meta_path)
    del sys.modules["tfprof_watched_a"]
    import tfprof_watched_a

    assert len(seen) == 1


def test_other_imports_are_untouched_and_a_package_works(module_dir: Path) -> None:
    package = module_dir / "tfprof_watched_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import inner\n")
    (package / "inner.py").write_text("VALUE = 3\n")
    (module_dir / "tfprof_watched_other.py").write_text("X = 1\n")
    seen: list[ModuleType] = []
    post_import.when_imported("tfprof_watched_pkg", seen.append)
    import tfprof_watched_other  # type: ignore[import-not-found]

    assert tfprof_watched_other.X == 1 and seen == []
    import tfprof_watched_pkg  # type: ignore[import-not-found]

    assert seen == [tfprof_watched_pkg] and tfprof_watched_pkg.inner.VALUE == 3


def test_already_imported_module_is_called_at_once(module_dir: Path) -> None:
    (module_dir / "tfprof_watched_b.py").write_text("")
    import tfprof_watched_b  # type: ignore[import-not-found]

    seen: list[ModuleType] = []
    post_import.when_imported("tfprof_watched_b", seen.append)
    assert seen == [tfprof_watched_b]
    assert post_import._finder is None


def test_a_missing_module_still_fails_to_import(module_dir: Path) -> None:
    seen: list[ModuleType] = []
    post_import.when_imported("tfprof_watched_missing", seen.append)
    with pytest.raises(ModuleNotFoundError):
        import tfprof_watched_missing  # type: ignore[import-not-found]  # noqa: F401
    assert seen == []


def test_a_spec_looked_up_before_the_import_leaves_the_name_watched(module_dir: Path) -> None:
    """TensorFlow asks ``importlib.util.find_spec("keras")`` before it imports keras: the
    callback must still run when keras is imported, once."""
    import importlib.util

    (module_dir / "tfprof_watched_probe.py").write_text("READY = True\n")
    seen: list[bool] = []
    post_import.when_imported("tfprof_watched_probe", lambda m: seen.append(m.READY))
    assert importlib.util.find_spec("tfprof_watched_probe") is not None
    assert seen == []
    import tfprof_watched_probe  # type: ignore[import-not-found]

    assert seen == [True] and tfprof_watched_probe.READY
    assert not any(isinstance(f, post_import.PostImportFinder) for f in sys.meta_path)
