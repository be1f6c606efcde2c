"""The gRPC front door: validate, append events, read projections."""
