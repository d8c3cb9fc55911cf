"""Generated protobuf and gRPC code for the tfprof.v1 wire (see scripts/gen_proto.sh)."""
