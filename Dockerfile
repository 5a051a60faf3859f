# ksched: one image for `ksched operator` and `ksched scheduler`.
#   docker build -t ksched:0.1.0 .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin ksched \
 && install -D -m 0755 target/dist/ksched /out/ksched

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ksched /usr/local/bin/ksched
USER 65532:65532
EXPOSE 10259
ENTRYPOINT ["/usr/local/bin/ksched"]
