# One image for both programs: `kraft` (a KRaft controller) and `kraft-operator`.
#   docker build -t kraft-quorum:0.1.0 .
# The install steps are the scripts in docker/, which tests/shipping/test_image.py also runs
# (in a clean virtual environment), so what the image does is tested without a container engine.
# The sandbox (sandbox/) is a test world: neither it nor its dependencies are in the image.
#
# Supply chain: the Python dependencies are the lock file docker/requirements.lock (`make lock`:
# pip-compile --generate-hashes), downloaded and installed with `pip --require-hashes` (a file
# whose sha256 is not in the lock is refused); `make sbom` writes the image's CycloneDX SBOM
# from the same lock. The base images are referenced by digest. THE DIGESTS ARE NOT VERIFIED
# AGAINST THE REGISTRY: no registry could be reached where they were written; each is the one
# public Dockerfiles name for that tag (the slim one in several independent repositories, the
# builder's in one). A digest that is wrong fails the pull, never pulls another image. Check
# both before a release, and set them to what the registry serves now:
#   docker buildx imagetools inspect python:3.11.13-bookworm --format '{{.Manifest.Digest}}'
#   docker buildx imagetools inspect python:3.11.13-slim-bookworm --format '{{.Manifest.Digest}}'

# ---- builder: compiles the C extension and builds every wheel the image installs
FROM python:3.11.13-bookworm@sha256:e75be128195ec5b78912d55646e87d4638fc95234302a34472aeb2a474334cb1 AS builder
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY kraft/ kraft/
COPY operator/ operator/
COPY pipeline/ pipeline/
COPY docker/ docker/
RUN sh docker/build-wheels.sh /src /wheels python3

# ---- runtime: slim, non-root, read-only root file system friendly
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1
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
