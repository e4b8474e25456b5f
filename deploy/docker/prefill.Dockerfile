# baton-prefill, the cloud prefill service, on an NVIDIA CUDA runtime base.
#
#   docker build -f deploy/docker/prefill.Dockerfile -t baton-prefill .
#   docker run --gpus all -p 50051:50051 -v /models:/models:ro baton-prefill \
#       --model /models/model-f16.gguf
#
# Ubuntu 24.04 ships the same gRPC (1.51), protobuf (3.21) and Abseil
# (20220623) as Debian 12, which the project builds against. The build stage
# copies the shared libraries the binaries need (apart from glibc and the CUDA
# runtime libraries the base already has) into /opt/baton/lib, so the runtime
# stage needs no -dev packages.
ARG CUDA_VERSION=12.6.3
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
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
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATON_BUILD_TESTS=OFF -DBATON_CUDA=ON \
    && cmake --build build --target baton-prefill baton \
    && mkdir -p /opt/baton/bin /opt/baton/lib \
    && cp build/bin/baton-prefill build/bin/baton /opt/baton/bin/ \
    && ldd build/bin/baton-prefill build/bin/baton \
       | awk '/=> \// { print $3 }' | sort -u \
       | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*)\.so' \
       | xargs -r -I{} cp -L {} /opt/baton/lib/

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
LABEL org.opencontainers.image.title="baton-prefill" \
      org.opencontainers.image.description="Baton cloud prefill service (gRPC, CUDA)"
RUN groupadd --system --gid 10001 baton \
    && useradd --system --uid 10001 --gid baton --home-dir /var/lib/baton --create-home --shell /usr/sbin/nologin baton
COPY --from=build /opt/baton/ /opt/baton/
COPY --from=build /src/deploy/models/ /opt/baton/models/
ENV PATH=/opt/baton/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/baton/lib
USER 10001:10001
WORKDIR /var/lib/baton
EXPOSE 50051
# The model comes from a mounted volume (--model); the bundled tiny model is
# at /opt/baton/models for a smoke test.
ENTRYPOINT ["/opt/baton/bin/baton-prefill", "--listen", "0.0.0.0:50051"]
CMD ["--model", "/opt/baton/models/baton-tiny-kjv-f16.gguf"]
