"""The collector's service half: the gRPC server, ingest and its checks, authentication,
budgets, live streams and capture windows, metrics and retention."""
