#!/bin/sh
# Builds the layout shell for weston 10: build.sh OUTPUT.so [--asan]
# The tests build with it (and the weston image should), so the flags live in one place.
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
src=$(dirname "$0")/layout.c
# shellcheck disable=SC2086 # pkg-config output and $extra are word lists
exec "${CC:-cc}" -shared -fPIC -O2 -Wall -Wextra -Werror $extra -o "$out" "$src" \
	$(pkg-config --cflags --libs libweston-10 libweston-desktop-10 weston wayland-server)
