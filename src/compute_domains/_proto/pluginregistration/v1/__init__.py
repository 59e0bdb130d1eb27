"""Generated stubs (scripts/gen_proto.sh)."""
