"""The tfprof agent: launcher, bootstrap, in-process hook, tracer sources and relay."""

__version__ = "0.1.0"
