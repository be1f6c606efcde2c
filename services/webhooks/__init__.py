"""Webhooks: peerlog's events POSTed to a registered URL, signed, retried, dead-lettered after N failures."""
