# ksched: one image for `ksched operator` and `ksched scheduler`, for users who build with a
# registry at hand (plain Dockerfile syntax: docker build, podman build, buildah, kaniko):
#   docker build -t REGISTRY/ksched:0.1.0 .
# `make image` builds the same image (the same dist binary, laid out by the same
# hack/image-rootfs.sh) with podman, no daemon and no registry, as an OCI archive under target/image/.
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked --bin ksched \
 && hack/image-rootfs.sh target/dist/ksched /rootfs

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8080 10259
ENTRYPOINT ["/usr/local/bin/ksched"]
