# The fake engram cloud as a container. The base image is a build argument because machines without
# a container registry build from a local image (scripts/docker-engine.sh base makes one):
#   engram-harness cloud image     (both steps below; tags engram-sync-kit/fake-cloud:<content digest>)
# or by hand:
#   scripts/build-wheelhouse.sh
#   docker build --build-arg BASE_IMAGE=local/debian-python:bookworm -t engram-sync-kit/fake-cloud:latest .
# Nothing is fetched from a package index during the build: the wheels come from .cache/wheelhouse,
# built on the host with the image's Python version (Debian bookworm: 3.11).
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

# Settings and metadata first: they never change, so their layers stay cached.
# ENGRAM_FAKE_CLOUD_TLS=1 serves HTTPS with a throwaway CA written to ENGRAM_FAKE_CLOUD_CA_OUT.
# ENGRAM_CLOUD_TOKEN, ENGRAM_CLOUD_ALLOWED_PROJECTS and ENGRAM_CLOUD_INSECURE_NO_AUTH configure the fake
# like the real server. The server binds 0.0.0.0 here, so it needs ENGRAM_FAKE_CLOUD_CONTROL_TOKEN (the
# bearer of its /_fake/ control API); without one it refuses to start. The harness's --cloud docker runs
# the image on the host network bound to 127.0.0.1 instead, which needs none.
ENV PATH=/opt/engram-kit/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ENGRAM_FAKE_CLOUD_PORT=8080 \
    ENGRAM_FAKE_CLOUD_TLS=0 \
    ENGRAM_FAKE_CLOUD_CA_OUT=/run/engram-fake-cloud/ca.pem
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python3", "-c", "import os, ssl, urllib.request as u; tls = os.environ['ENGRAM_FAKE_CLOUD_TLS'] == '1'; u.urlopen(('https' if tls else 'http') + '://127.0.0.1:' + os.environ['ENGRAM_FAKE_CLOUD_PORT'] + '/health', timeout=2, context=ssl._create_unverified_context() if tls else None)"]
# `exec` makes the server PID 1, so `docker stop` reaches it with SIGTERM.
CMD ["/bin/sh", "-c", "mkdir -p \"$(dirname \"$ENGRAM_FAKE_CLOUD_CA_OUT\")\" && if [ \"$ENGRAM_FAKE_CLOUD_TLS\" = 1 ]; then set -- --tls --ca-out \"$ENGRAM_FAKE_CLOUD_CA_OUT\"; fi && exec engram-fake-cloud serve --host 0.0.0.0 --port \"$ENGRAM_FAKE_CLOUD_PORT\" \"$@\""]

# Dependencies, then the project: editing the project rebuilds only the last two layers.
COPY .cache/wheelhouse/deps /tmp/wheelhouse/deps
RUN python3 -m venv /opt/engram-kit \
    && /opt/engram-kit/bin/pip install --quiet --no-index --disable-pip-version-check /tmp/wheelhouse/deps/*.whl \
    && rm -rf /tmp/wheelhouse /root/.cache
COPY .cache/wheelhouse/project /tmp/wheelhouse/project
RUN /opt/engram-kit/bin/pip install --quiet --no-index --no-deps --disable-pip-version-check \
        /tmp/wheelhouse/project/*.whl \
    && /opt/engram-kit/bin/engram-fake-cloud --version \
    && rm -rf /tmp/wheelhouse /root/.cache
