"""Generated protobuf and gRPC code; see scripts/regen.py."""
