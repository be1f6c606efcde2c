"""The `peerlog` command line."""
