# syntax=docker/dockerfile:1
#
# One image for the whole visitors-operator suite. It carries every binary:
#   visitors-controller, backup-controller, restore-controller   the three controllers
#   visitors-agent                                               data plane run by backup/restore Jobs
#   visitors-archiver                                            binary log archiver (point-in-time recovery)
#   crdgen                                                       prints/writes the CRDs
# There is no default command: each Deployment or Job sets its own `command`, e.g.
#   docker run --rm IMAGE  ->  nothing to run;   command: ["/usr/local/bin/backup-controller"]
#
# Build (from the repository root; needs BuildKit, the default builder of current Docker):
#   docker build -t ghcr.io/visitors-operator/visitors-operator:0.1.0 .

# ---- build ---------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the crates.io download cache and the target directory between builds,
# so a code change recompiles only the workspace crates, not every dependency. They are not
# part of the image, which is why the binaries are copied out to /out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
        --bin visitors-controller \
        --bin backup-controller \
        --bin restore-controller \
        --bin visitors-agent \
        --bin visitors-archiver \
        --bin crdgen \
 && mkdir -p /out \
 && cp target/release/visitors-controller target/release/backup-controller \
       target/release/restore-controller target/release/visitors-agent \
       target/release/visitors-archiver target/release/crdgen /out/

# ---- runtime -------------------------------------------------------------------------------
# distroless/cc: glibc, libgcc, CA certificates and tzdata; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/visitors-operator/visitors-operator" \
      org.opencontainers.image.description="visitors-operator: Visitors Site, MySQL backup and restore controllers and agent" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/ /usr/local/bin/
# 65532 is the distroless `nonroot` user; numeric so that runAsNonRoot can verify it.
USER 65532:65532
