"""The relay the launcher and the node daemon share: hook frames in over a Unix socket,
batches out over gRPC, the spool for what the collector has not acknowledged."""
