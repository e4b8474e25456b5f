# baton-edge, the edge agent, on Debian 12 slim (CPU only).
#
#   docker build -f deploy/docker/edge.Dockerfile -t baton-edge .
#   docker run -p 7070:7070 -v baton-state:/var/lib/baton \
#       -v /etc/baton/edge-secrets:/run/secrets/baton:ro baton-edge \
#       --cloud prefill.example.com:50051 --cloud-ca /etc/baton/cloud-ca.pem
#
# Authenticated and TLS by default: the agent listens on 0.0.0.0 (a container
# is reached from outside), so it needs API keys and serves TLS; mount a
# directory at /run/secrets/baton holding api-keys (one key per line, mode
# 0600, owned by uid 10001), tls.crt and tls.key. Clients: `baton --ca tls.crt
# --api-key-file KEYFILE`. Without the mount the agent refuses to start.
#
# Multi-stage: the build stage compiles baton-edge and the baton CLI (and
# derives the bundled model's Q4_0 copy); the runtime stage holds only the
# binaries, their shared libraries and the model.
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libzstd-dev libssl-dev libxxhash-dev libicu-dev nlohmann-json3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto/ proto/
COPY common/ common/
COPY cloud_prefill/ cloud_prefill/
COPY edge_decode/ edge_decode/
COPY tools/ tools/
COPY deploy/CMakeLists.txt deploy/CMakeLists.txt
COPY deploy/models/ deploy/models/
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATON_BUILD_TESTS=OFF -DBATON_CUDA=OFF \
    && cmake --build build --target baton-edge baton baton_bundled_models \
    && mkdir -p /opt/baton/bin /opt/baton/lib /opt/baton/models \
    && cp build/bin/baton-edge build/bin/baton /opt/baton/bin/ \
    && cp build/models/baton-tiny-kjv-q4_0.gguf /opt/baton/models/ \
    && ldd build/bin/baton-edge build/bin/baton \
       | awk '/=> \// { print $3 }' | sort -u \
       | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so' \
       | xargs -r -I{} cp -L {} /opt/baton/lib/

FROM debian:12-slim AS runtime
LABEL org.opencontainers.image.title="baton-edge" \
      org.opencontainers.image.description="Baton edge agent (gRPC, CPU decode)"
RUN groupadd --system --gid 10001 baton \
    && useradd --system --uid 10001 --gid baton --home-dir /var/lib/baton --create-home --shell /usr/sbin/nologin baton \
    && mkdir -p /var/lib/baton/packs /var/lib/baton/sessions \
    && chown -R baton:baton /var/lib/baton
COPY --from=build /opt/baton/ /opt/baton/
ENV PATH=/opt/baton/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/baton/lib
USER 10001:10001
WORKDIR /var/lib/baton
VOLUME ["/var/lib/baton"]
EXPOSE 7070
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s \
  CMD ["/opt/baton/bin/baton", "health", "--edge", "localhost:7070", "--ca", "/run/secrets/baton/tls.crt", \
       "--ready", "--timeout", "3s"]
ENTRYPOINT ["/opt/baton/bin/baton-edge", "--listen", "0.0.0.0:7070", \
            "--api-key-file", "/run/secrets/baton/api-keys", \
            "--tls-cert", "/run/secrets/baton/tls.crt", "--tls-key", "/run/secrets/baton/tls.key", \
            "--packs", "/var/lib/baton/packs", "--sessions", "/var/lib/baton/sessions"]
CMD ["--model", "/opt/baton/models/baton-tiny-kjv-q4_0.gguf"]
