# virtcap's exporter image: `docker build -t virtcap .`, `docker run -p 10463:10463 virtcap`.
# The build stage compiles libvirt-python against libvirt's headers; the runtime stage carries only
# the libvirt client library and libpq (psycopg's, for a claim ledger in PostgreSQL) and runs as an
# unprivileged user.
FROM python:3.11.10-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc pkg-config libvirt-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.10-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends libvirt0 libpq5 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10463 --user-group --home-dir /var/lib/virtcap --create-home virtcap
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER virtcap
WORKDIR /var/lib/virtcap
EXPOSE 10463
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:10463/-/healthy', timeout=2).status != 200)"]
ENTRYPOINT ["virtcap"]
# Inside the container every interface: the published port reaches the exporter through the
# container's own address, which the demo's default of 127.0.0.1 would refuse.
CMD ["serve", "--demo", "--web.listen-address", ":10463"]
