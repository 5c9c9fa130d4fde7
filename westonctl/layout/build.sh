#!/bin/sh
# Builds the layout shell for weston 14: build.sh OUTPUT.so [--asan]
# Name the output *-shell.so (weston appends -shell.so to a --shell= name without it).
# The tests build with it (and the weston image should), so the flags live in one place.
# It builds where libweston-14 is installed; elsewhere it runs itself from the trixie
# root through trixie-run (build-support/, on PATH under ./pants).
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUTPUT.so [--asan]" >&2
	exit 2
fi
out=$1
extra=""
if [ $# -eq 2 ]; then
	if [ "$2" != "--asan" ]; then
		echo "unknown option: $2 (only --asan)" >&2
		exit 2
	fi
	extra="-fsanitize=address -fno-omit-frame-pointer -g"
fi
if ! pkg-config --exists libweston-14 2>/dev/null; then
	if ! command -v trixie-run >/dev/null; then
		echo "$0: libweston-14 is not installed here and trixie-run is not on PATH" >&2
		exit 1
	fi
	exec trixie-run sh "$0" "$@"
fi
dir=$(dirname "$0")
protocols="$(pkg-config --variable=prefix libweston-14)/share/libweston-14/protocols"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
# The module captures through its own client of weston_capture_v1.
wayland-scanner client-header "$protocols/weston-output-capture.xml" \
	"$gen/weston-output-capture-client-protocol.h"
wayland-scanner private-code "$protocols/weston-output-capture.xml" \
	"$gen/weston-output-capture-protocol.c"
# shellcheck disable=SC2086 # pkg-config output and $extra are word lists
"${CC:-cc}" -shared -fPIC -O2 -Wall -Wextra -Werror -fvisibility=hidden $extra -I"$gen" -I"$dir" \
	-o "$out" "$dir"/*.c "$gen/weston-output-capture-protocol.c" \
	$(pkg-config --cflags --libs libweston-14 weston wayland-server wayland-client)
