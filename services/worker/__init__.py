"""The Faust worker that hosts the stream processors."""
