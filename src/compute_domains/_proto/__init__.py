"""Generated protobuf/gRPC stubs for the kubelet wire contract; never edit by hand.

Regenerate with scripts/gen_proto.sh from the .proto files in proto/.
"""
