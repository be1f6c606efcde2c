"""The model layer: chat completions (structured and text), embeddings and token counting.

Every chat and embedding call goes through the `openai` client, so any OpenAI-compatible server works.

Import from the modules (`services.llm.client`, `.embeddings`, `.errors`, `.settings`, `.tokens`): the
package imports none of them, because every process reads `services.llm.settings` while the projector and
most CLI commands never call a model, and importing the `openai` client and numpy with the package took
about 1 s of each such process's start.
"""
