"""Readers of recorded trace files (TF timeline, Kineto, tfprof's own exports) into records."""
