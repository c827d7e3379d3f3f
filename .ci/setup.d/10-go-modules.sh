#!/usr/bin/env bash
# The module graph's go.mod files, not only the packages a build compiles: engine/llm's
# TestExternalModule builds a user's module offline (GOPROXY=off, -mod=mod), which loads the whole
# graph (test-only requirements of dependencies included). A fresh machine's module cache lacks them
# until something lists the graph.
set -euo pipefail
cd "$(dirname "$0")/../.."
go mod download
go list -m all >/dev/null
echo "go modules: $(go list -m all | wc -l) in the graph"
