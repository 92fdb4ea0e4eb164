# combo-service image: the service and the demo as static binaries on distroless/static (no shell, no libc), running as non-root.
#
#   docker build -t combo-service .
#   docker run --rm --stop-timeout 20 -p 127.0.0.1:8888:8888 -p 127.0.0.1:9100:9100 -e COMBO_REDIS_ADDR=redis:6379 \
#     -e COMBO_WORKER_CONSUMER=replica-1 combo-service
# (both ports have no login: publish them only on loopback or a private
# network, see README's "Exposure and secrets"; a consumer name stable across restarts: the default, the hostname, is a
# new container id each run, and a restarted replica would then leave its
# pending windows for another to claim, late; and time to drain: docker
# stop kills after 10 s, where the drain may take server.shutdown_timeout,
# 15 s, plus the RPC server's 2 s, as compose's stop_grace_period allows,
# plus server.shutdown_delay when it is set)
#   docker run --rm --entrypoint /usr/local/bin/combo-demo combo-service -addr host:8888 -redis host:6379
#
# The go build lines are build.sh's, word for word (deploy/container_test.go
# checks it): the README's `go build -o <bin> .` plus CGO_ENABLED=0 (static),
# -trimpath (reproducible paths) and -ldflags="-s -w" (no symbol tables; the
# service's also stamps the revision).

FROM golang:1.26 AS build
# The golang images set GOTOOLCHAIN=local, which ignores go.mod's toolchain
# line: a cached golang:1.26 older than it would build without the
# standard library's fixes that line asks for (README: Known
# vulnerabilities). auto uses the image's Go when it is that new or newer,
# and fetches that toolchain otherwise.
ENV GOTOOLCHAIN=auto
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The commit built (docker build --build-arg REVISION=$(./build.sh --revision)):
# .git is not in the build context, so Go cannot stamp it itself.
ARG REVISION=
RUN mkdir -p output/bin && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedRevision=${REVISION}" -o output/bin/combo-service . && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o output/bin/combo-demo ./cmd/combo-demo

FROM gcr.io/distroless/static-debian12:nonroot
ARG REVISION=
LABEL org.opencontainers.image.revision="${REVISION:-unknown}"
COPY --from=build /src/output/bin/ /usr/local/bin/
# nonroot (65532), numeric so that runAsNonRoot checks can verify it.
USER 65532:65532
# 8888: Kitex RPC (server.addr); 9100: /metrics, /healthz, /readyz (metrics.addr).
EXPOSE 8888 9100
# Liveness: the binary GETs /healthz on its own configured metrics.addr
# (distroless has no curl or wget). It sees the config file only through
# COMBO_CONFIG (or COMBO_METRICS_ADDR), not a -conf argument: use those.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/combo-service", "-healthcheck", "/healthz"]
ENTRYPOINT ["/usr/local/bin/combo-service"]
