"""What runs inside the user's process: the hook, its frames, tracer sources,
post-import routes and capture control. Standard library only, CPython 3.9 or newer: the
bootstrap ships this package with ``tfprof.core`` and ``tfprof.readers`` to any interpreter."""
