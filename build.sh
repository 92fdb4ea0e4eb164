#!/usr/bin/env bash
# Builds the binaries the container image carries, exactly as the Dockerfile
# does (deploy/container_test.go checks that the go build lines agree):
#   output/bin/combo-service  the service (README: go build -o <bin> .)
#   output/bin/combo-demo     the demo (cmd/combo-demo)
set -euo pipefail
cd "$(dirname "$0")"
# The commit the service names in its start log and combo_build_info: Go's
# own VCS stamp where it has one; this one otherwise (REVISION, as the
# Dockerfile's build argument, else the checkout's commit, with +dirty for
# uncommitted changes, as Go marks its own).
if [ -z "${REVISION:-}" ] && REVISION=$(git rev-parse HEAD 2>/dev/null); then
  if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
    REVISION="$REVISION+dirty"
  fi
fi
# ./build.sh --revision prints that revision and builds nothing: the
# Dockerfile's build argument, whose context has no .git
# (docker build --build-arg REVISION=$(./build.sh --revision) .).
if [ "${1:-}" = "--revision" ]; then
  echo "${REVISION:-}"
  exit 0
fi
mkdir -p output/bin
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedRevision=${REVISION}" -o output/bin/combo-service .
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o output/bin/combo-demo ./cmd/combo-demo
