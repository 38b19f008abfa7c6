"""Generated gRPC code (make proto)."""
