#!/usr/bin/env bash
# Issue 7's end-to-end check: builds gollm, starts `gollm serve` with the built-in model on a free
# 127.0.0.1 port (with a chat template that renders tools, tools_template.jinja), and drives it with the
# official `openai` npm client (engine/openai/testdata/openai, installed by
# .ci/setup.d/30-serve-testdata.sh). Then SIGTERMs the server and checks that it exits 0.
# The server is always killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=engine/openai/testdata/openai
if [ ! -d "$dir/node_modules/openai" ]; then
	echo "openai client missing: run .ci/setup.d/30-serve-testdata.sh" >&2
	exit 1
fi
tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/gollm" ./cmd/gollm
port=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
key="ci-$RANDOM-$RANDOM"
maxBody=65536
"$tmp/gollm" serve --host 127.0.0.1 --port "$port" --api-key "$key" --max-body-bytes "$maxBody" \
	--kv-blocks 256 --shutdown-timeout 10s --chat-template "$dir/tools_template.jinja" >"$tmp/serve.log" 2>&1 &
pid=$!

status=0
GOLLM_URL="http://127.0.0.1:$port" GOLLM_API_KEY="$key" GOLLM_MAX_BODY="$maxBody" node "$dir/client.mjs" || status=$?

# Graceful shutdown: SIGTERM, then the process must exit 0 within the drain deadline.
kill -TERM "$pid"
rc=0
for _ in $(seq 1 300); do
	if ! kill -0 "$pid" 2>/dev/null; then break; fi
	sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
	echo "gollm serve did not exit within 30s of SIGTERM"
	status=1
else
	wait "$pid" || rc=$?
	pid=""
	if [ "$rc" != 0 ]; then
		echo "gollm serve exited with $rc after SIGTERM, want 0"
		status=1
	else
		echo "gollm serve exited 0 after SIGTERM"
	fi
fi
if [ "$status" != 0 ]; then
	echo "--- server log"
	tail -50 "$tmp/serve.log"
fi
exit "$status"
