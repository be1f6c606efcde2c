"""The worker process that hosts the stream processors (`peerlog worker`)."""
