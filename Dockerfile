# One image for both programs: `kraft` (a KRaft controller) and `kraft-operator`.
#   docker build -t kraft-quorum:0.1.0 .
# The install steps are the scripts in docker/, which tests/shipping/test_image.py also runs
# (in a clean virtual environment), so what the image does is tested without a container engine.
# The sandbox (sandbox/) is a test world: neither it nor its dependencies are in the image.

# ---- builder: compiles the C extension and builds every wheel the image installs
FROM python:3.11.13-bookworm AS builder
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY kraft/ kraft/
COPY operator/ operator/
COPY pipeline/ pipeline/
COPY docker/ docker/
RUN sh docker/build-wheels.sh /src /wheels python3

# ---- runtime: slim, non-root, read-only root file system friendly
FROM python:3.11.13-slim-bookworm
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kraft-quorum" \
      org.opencontainers.image.description="KRaft controller quorum node (kraft) and its Kubernetes operator (kraft-operator)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kraft-quorum/kraft-quorum"
# No byte code written at run time (it was compiled at install), logs unbuffered, and HOME on
# the one writable path besides the data volume.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=builder /wheels /tmp/wheels
COPY docker/install.sh /tmp/install.sh
RUN sh /tmp/install.sh /tmp/wheels python3 \
    && rm -rf /tmp/wheels /tmp/install.sh \
    && groupadd --system --gid 10001 kraft \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp kraft \
    && mkdir -p /var/lib/kraft \
    && chown 10001:10001 /var/lib/kraft
# The data volume (the metadata log, snapshots, quorum-state, meta.properties).
VOLUME ["/var/lib/kraft"]
USER 10001:10001
WORKDIR /var/lib/kraft
# Kubernetes probes check health (the admin HTTP port's /healthz and /readyz), so no HEALTHCHECK.
# dumb-init forwards SIGTERM to the node, which flushes and leaves the quorum cleanly.
ENTRYPOINT ["dumb-init", "--"]
CMD ["kraft", "--help"]
