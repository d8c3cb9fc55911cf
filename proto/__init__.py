"""Generated protobuf and gRPC code for the tfprof.v1 wire (see scripts/gen_proto.sh)."""

# The version of the stream protocol in proto/collector.proto that agents say in their
# Hello and collectors accept; bump it when a change is not backwards compatible.
PROTOCOL_VERSION = 1
