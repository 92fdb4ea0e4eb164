#!/usr/bin/env bash
# Builds the binaries the container image carries, exactly as the Dockerfile
# does (deploy/container_test.go checks that the go build lines agree):
#   output/bin/combo-service  the service (README: go build -o <bin> .)
#   output/bin/combo-demo     the demo (cmd/combo-demo)
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p output/bin
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o output/bin/combo-service .
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o output/bin/combo-demo ./cmd/combo-demo
