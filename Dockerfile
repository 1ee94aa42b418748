# syntax=docker/dockerfile:1
# The diagnosd daemon image. Build from the repository root:
#   docker build -t diagnosd:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
# Run (settings from DIAGNOSD_* variables or `--config FILE`; see docs/deploy.md):
#   docker run -p 8080:8080 -e DIAGNOSD_PROMETHEUS_URL=http://prometheus:9090 \
#     -e DIAGNOSD_AUTH_API_TOKENS=$(openssl rand -hex 16) -v diagnosd-data:/var/lib/diagnosd diagnosd:0.1.0
# Both stages start from the same image, so the virtualenv built in the first runs in the second.
ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a wheel of the package, installed with its runtime dependencies only (no dev extras).
# The wheel carries the trees: rules/ is the package diagnosd.rules (pyproject.toml), so it is copied here.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY diagnosd/ diagnosd/
COPY rules/ rules/
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/diagnosd/venv \
 && pip --python /opt/diagnosd/venv/bin/python install /wheels/diagnosd-*.whl

# --- runtime: the virtualenv (the package and its trees), an unprivileged numeric user.
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="diagnosd" \
      org.opencontainers.image.description="Walks LLM-serving troubleshooting trees against Prometheus and says which branch holds, with the evidence." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim"

# UID/GID 10001: numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN groupadd --system --gid 10001 diagnosd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/diagnosd --no-create-home \
      --shell /usr/sbin/nologin diagnosd \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/diagnosd

COPY --from=build /opt/diagnosd/venv /opt/diagnosd/venv

# No DIAGNOSD_RULES_DIR: the installed package finds its own trees; set it (or pass --rules DIR)
# to use others. The store keeps its default relative path (diagnosd.db), so it lands in the
# working directory, the volume; the store path is deliberately not set here, so that a settings
# file can still set it.
ENV PATH=/opt/diagnosd/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/diagnosd
VOLUME ["/var/lib/diagnosd"]
USER 10001:10001
EXPOSE 8080
# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (helm/diagnosd).
ENTRYPOINT ["diagnosd"]
# Off loopback, diagnosd refuses to start without credentials (DIAGNOSD_AUTH_API_TOKENS...) unless
# DIAGNOSD_AUTH_ALLOW_ANONYMOUS=true: see docs/deploy.md, "Security defaults".
CMD ["serve", "--host", "0.0.0.0"]
