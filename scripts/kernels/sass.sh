#!/bin/bash
# sass.sh — what ptxas makes of a committed Hopper PTX module, on a machine without a GPU.
#
#   scripts/kernels/sass.sh MODULE [KERNEL]
#
# MODULE is one of the PTX files the driver compiles at load (model/kernels/prefill_sm90.ptx,
# gemm_sm90.ptx, fp8_sm90.ptx). The script compiles it for sm_90a with a ptxas newer than nvcc 11.8's
# (which cannot compile wgmma), prints each entry point's registers, spills and ptxas's warnings (C7513:
# wgmma serialized), and with KERNEL writes that kernel's SASS to $TMPDIR/KERNEL.sass and prints its
# wgmma groups and waits (HGMMA, WARPGROUP.*) and local-memory traffic (STL/LDL).
#
# The ptxas is CUDA 12.4's, from Debian trixie's non-free nvidia-cuda-toolkit package, downloaded once
# into ${GOLLM_PTXAS_DIR:-$HOME/.cache/gollm-ptxas} (about 90 MB; ptxas, cuobjdump and nvdisasm kept).
# The driver's own compiler may differ in registers and scheduling, so speed is still measured on the
# device; what this shows is the code's shape: which products overlap, what spills, where.
set -euo pipefail
module=${1:?usage: sass.sh MODULE.ptx [KERNEL]}
kernel=${2:-}
dir=${GOLLM_PTXAS_DIR:-$HOME/.cache/gollm-ptxas}
ptxas=$dir/usr/bin/ptxas
if [ ! -x "$dir/usr/bin/nvdisasm" ]; then
	mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
	pool=$(curl -fsS "$mirror/dists/trixie/non-free/binary-amd64/Packages.xz" | xz -d |
		awk '/^Package: nvidia-cuda-toolkit$/ { p = 1 } p && /^Filename:/ && !done { print $2; done = 1 }')
	[ -n "$pool" ] || { echo "sass.sh: nvidia-cuda-toolkit not found in trixie's non-free index" >&2; exit 1; }
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	echo "sass.sh: fetching $pool" >&2
	curl -fsS -o "$tmp/tk.deb" "$mirror/$pool"
	dpkg-deb -x "$tmp/tk.deb" "$tmp/x"
	mkdir -p "$dir/usr/bin"
	cp "$tmp/x/usr/bin/ptxas" "$tmp/x/usr/bin/cuobjdump" "$tmp/x/usr/bin/nvdisasm" "$dir/usr/bin/"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tr -d '\0' <"$module" >"$work/m.ptx" # the committed modules end in a NUL for the driver's loader
"$ptxas" -arch=sm_90a -v -o "$work/m.cubin" "$work/m.ptx" 2>&1 |
	awk '/Compiling entry function/ { match($0, /\x27[^\x27]*\x27/); name = substr($0, RSTART + 1, RLENGTH - 2) }
	     /spill stores/ { spill = $0; sub(/^ +/, "", spill) }
	     /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); printf "%-40s %s; %s\n", name, substr($0, RSTART, RLENGTH), spill }
	     /warning/ { print }'
if [ -n "$kernel" ]; then
	out=${TMPDIR:-/tmp}/$kernel.sass
	PATH=$dir/usr/bin:$PATH cuobjdump -sass -fun "$kernel" "$work/m.cubin" >"$out" # its nvdisasm
	echo "== $kernel: $out"
	grep -E 'HGMMA|WARPGROUP|STL|LDL' "$out" | sed -E 's@^ +/\*([0-9a-f]+)\*/ +@\1 @; s@ +/\*.*@@' || true
fi
