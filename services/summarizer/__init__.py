"""The summarizer: rolling short and long summaries per session."""
