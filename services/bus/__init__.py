"""The Kafka log: topics, appending events atomically, and consistency tokens."""
