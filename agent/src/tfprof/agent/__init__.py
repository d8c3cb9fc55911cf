"""The tfprof agent: launcher, bootstrap, in-process hook, tracer sources and relay."""
