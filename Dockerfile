# The peerlog services (API server, projector, processors) for docker compose.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services services
COPY projections projections
COPY infra infra
COPY gen gen
COPY proto proto
RUN pip install --no-cache-dir .
ENTRYPOINT ["peerlog"]
