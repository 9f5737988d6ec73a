# Locking-Center image: lcd (the server) and lc-cli, static, on an empty
# base. Build it with deploy/docker/create_image.sh, or directly:
#
#   docker build --build-arg VERSION=1.2.3 --build-arg COMMIT=abc1234 -t locking-center .
#
# The build stage runs on the builder's own platform and cross-compiles for
# the target, so a multi-platform build needs no emulation.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-alpine AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=none
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN GOOS="$TARGETOS" GOARCH="$TARGETARCH" go build -trimpath -buildvcs=false \
        -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
        -o /out/usr/local/bin/lcd ./cmd/lcd \
 && GOOS="$TARGETOS" GOARCH="$TARGETARCH" go build -trimpath -buildvcs=false \
        -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
        -o /out/usr/local/bin/lc-cli ./cmd/lc-cli
# The runtime stage has no shell: its /data and user database are made here.
RUN mkdir -p /out/data /out/etc \
 && echo 'locking-center:x:22119:22119:Locking-Center:/data:/sbin/nologin' > /out/etc/passwd \
 && echo 'locking-center:x:22119:' > /out/etc/group

FROM scratch AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="Locking-Center" \
      org.opencontainers.image.description="Lock server: named keys, one holder at a time, waiters served in arrival order" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/etc/ /etc/
COPY --from=build /out/usr/local/bin/ /usr/local/bin/
COPY --from=build --chown=22119:22119 /out/data /data
ENV PATH=/usr/local/bin
USER 22119:22119
WORKDIR /data
# mutex, manager, metrics, HTTP API
EXPOSE 22119 22120 22121 22122
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/lcd", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/lcd"]
