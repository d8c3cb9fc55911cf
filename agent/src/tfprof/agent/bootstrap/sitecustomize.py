# tfprof bootstrap: `tfprof-agent run` puts this folder first on PYTHONPATH so that every
# Python process of the job starts the tfprof hook. It must never raise, must run once,
# and must still run the user's own sitecustomize, which this file shadows.
def _tfprof_bootstrap() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("TFPROF_SOCKET"):
        try:
            from tfprof.agent import hook

            hook.start()
        except Exception as exc:
            try:
                name = type(exc).__name__
                sys.stderr.write(
                    f"tfprof: cannot start in {sys.executable} ({name}: {exc}); not traced\n"
                )
            except Exception:
                pass
    # Chain the next sitecustomize on the path, as if this one did not exist.
    try:
        import importlib.machinery
        import importlib.util

        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception:
        import traceback

        try:
            sys.stderr.write("Error in sitecustomize; traceback follows:\n")
            traceback.print_exc()
        except Exception:
            pass


_tfprof_bootstrap()
del _tfprof_bootstrap
