# The operator's container image: the production `spark-operator` binary (no simulator, no `dev`), run as
# a non-root user with no shell. The chart passes only `args` (`operator`, `controller`, `cleanup`, ...).
#
# Images cannot be built or pulled on the project's development machines; CI checks exactly what this
# builds with `cargo check --release --no-default-features --locked -p spark-operator` (see .ci/run).

# Pinned: the toolchain the workspace is tested with.
FROM docker.io/library/rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --no-default-features -p spark-operator \
 && install -D -m 0755 target/release/spark-operator /out/spark-operator

# distroless/cc: glibc and CA certificates, no shell, no package manager; `nonroot` is uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/spark-operator /usr/local/bin/spark-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/spark-operator"]
CMD ["operator"]
