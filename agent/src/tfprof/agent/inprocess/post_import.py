"""Run a callback right after a named top-level module has been imported.

``when_imported("tensorflow", on_import)`` puts one finder on ``sys.meta_path`` that
answers only for the watched names: it finds the module's spec through the finders
after it and wraps the spec's loader so that ``on_import(module)`` runs once the
module's own code has run; then it forgets the name. A spec looked up without being
loaded (``importlib.util.find_spec``, as TensorFlow does for ``keras`` before importing
it) leaves the name watched. A job that never imports a watched name
pays one dictionary lookup per top-level import; a module already imported gets its
callback at once. Standard library only: this runs inside every traced process.

Callbacks must not raise (the caller wraps them: a failure is its one ``tfprof:`` line),
and the module under import never sees the wrapper: its ``__loader__`` and
``__spec__.loader`` are its own.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _NotifyingLoader:
    """The module's own loader, with the callbacks run once its code has run."""

    def __init__(self, loader: Any, loaded: Callback) -> None:
        self._loader = loader
        self._loaded = loaded

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._loaded(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportFinder:
    """The ``sys.meta_path`` entry; it removes itself when no name is left to watch."""

    def __init__(self) -> None:
        self._watched: dict[str, list[Callback]] = {}
        self._lock = threading.Lock()

    def watch(self, name: str, callback: Callback) -> None:
        with self._lock:
            self._watched.setdefault(name, []).append(callback)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> Any:
        if fullname not in self._watched:  # the common case: not ours, nothing else done
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _NotifyingLoader(spec.loader, lambda m: self._loaded(fullname, m))
            return spec
        return None

    def _loaded(self, name: str, module: ModuleType) -> None:
        """``name``'s code has run: its callbacks, once (a second load of a spec found
        earlier finds none left)."""
        with self._lock:
            callbacks = self._watched.pop(name, None)
            if not self._watched:
                _remove(self)
        for callback in callbacks or ():
            callback(module)


_finder: PostImportFinder | None = None


def _remove(finder: PostImportFinder) -> None:
    global _finder
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass
    if _finder is finder:
        _finder = None


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once the top-level module ``name`` is imported (now, if
    it already is)."""
    global _finder
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    if _finder is None:
        _finder = PostImportFinder()
        sys.meta_path.insert(0, _finder)
    _finder.watch(name, callback)
