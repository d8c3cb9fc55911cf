"""The tfprof collector: gRPC ingest, storage, merge and export."""
