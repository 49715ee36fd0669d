# For machines with a container engine. Not built by the tests: `make image`
# (scripts/build-image, buildah from scratch) is the tested path, and the README says so.
# Both give the same layout: both binaries in /usr/local/bin, user 65532, CA certificates.
#
#   docker build --target controller -t capstan-controller:0.1.0 .
#   docker build --target sidecar -t capstan-sidecar:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin capstan-controller --bin capstan-sidecar \
 && objcopy --strip-debug target/release/capstan-controller /capstan-controller \
 && objcopy --strip-debug target/release/capstan-sidecar /capstan-sidecar

# glibc, libgcc_s, CA certificates and a nonroot user (65532), nothing else.
FROM gcr.io/distroless/cc-debian12:nonroot AS base
COPY --from=build /capstan-controller /capstan-sidecar /usr/local/bin/
USER 65532:65532

FROM base AS sidecar
ENTRYPOINT ["/usr/local/bin/capstan-sidecar"]

FROM base AS controller
ENTRYPOINT ["/usr/local/bin/capstan-controller"]
