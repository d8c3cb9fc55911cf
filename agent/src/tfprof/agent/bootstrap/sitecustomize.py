# tfprof bootstrap: `tfprof-agent run` puts a copy of this file first on PYTHONPATH so
# that every Python process of the job starts the tfprof hook. It must never raise, must
# run once, and must still run the user's own sitecustomize, which this file shadows.
# Any Python may run it (the job's interpreter need not have tfprof installed), so it
# parses under Python 2.7: no f-strings, no annotations.


def _tfprof_say(message):
    # type: (str) -> None
    import sys

    try:
        sys.stderr.write("tfprof: %s\n" % message)
        sys.stderr.flush()
    except Exception:
        pass


def _tfprof_start(here):
    # type: (str) -> None
    import sys

    implementation = getattr(sys, "implementation", None)
    name = getattr(implementation, "name", "python")
    if name != "cpython" or sys.version_info < (3, 9):
        version = ".".join(str(n) for n in sys.version_info[:3])
        _tfprof_say(
            "%s is %s %s: tfprof traces CPython 3.9 or newer; not traced"
            % (sys.executable, name, version)
        )
        return
    try:
        try:
            from tfprof.agent.inprocess import hook
        except ImportError as exc:
            if not (exc.name or "").startswith("tfprof"):
                raise
            # No tfprof in the job's environment: use the launcher's copy, last on the
            # path so that it shadows nothing of the job's.
            sys.path.append(here + "/hook-lib")
            from tfprof.agent.inprocess import hook
        hook.start()
    except Exception as exc:
        _tfprof_say(
            "cannot start in %s (%s: %s); not traced" % (sys.executable, type(exc).__name__, exc)
        )


def _tfprof_chain(here):
    # type: (str) -> None
    # Run the next sitecustomize on the path, as if this one did not exist.
    import os
    import sys

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.version_info[0] < 3:
        import imp

        try:
            found = imp.find_module("sitecustomize", path)
        except ImportError:
            return
        try:
            sys.modules["sitecustomize"] = imp.load_module("sitecustomize", *found)
        finally:
            if found[0] is not None:
                found[0].close()
        return
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


def _tfprof_bootstrap():
    # type: () -> None
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("TFPROF_SOCKET"):
        _tfprof_start(here)
    try:
        _tfprof_chain(here)
    except Exception:
        import traceback

        try:
            sys.stderr.write("Error in sitecustomize; traceback follows:\n")
            traceback.print_exc()
        except Exception:
            pass


_tfprof_bootstrap()
del _tfprof_bootstrap
