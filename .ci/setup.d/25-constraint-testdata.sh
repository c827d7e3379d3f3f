#!/usr/bin/env bash
# Test data for engine/constraint, from npm into an ignored node_modules/: ajv and ajv-formats, which
# validate constrained outputs (validate.mjs), and the JSON-Schema-Test-Suite's files
# (json-schema-test-suite), which the schema compiler's tests read. Idempotent: npm ci is skipped
# when node_modules was installed from the same lock file.
set -euo pipefail
cd "$(dirname "$0")/../../engine/constraint/testdata/npm"
sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.gollm-lock-sha256 2>/dev/null)" = "$sum" ]; then
	echo "engine/constraint/testdata/npm: node_modules up to date"
	exit 0
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
echo "$sum" >node_modules/.gollm-lock-sha256
