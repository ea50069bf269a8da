#!/bin/sh
# Installs the build into a scratch prefix and builds the example against it
# through pkg-config, as a user would; the example must run.
#   usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build="$1"
src="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/prefix" >/dev/null
pc="$(dirname "$(find "$dir/prefix" -name tmx.pc)")"
flags="$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs tmx)"
# shellcheck disable=SC2086 # flags are words
cc "$src/examples/self_pingpong.c" $flags -o "$dir/example"
LD_LIBRARY_PATH="$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir tmx)" "$dir/example"
echo "ok: installed, found by pkg-config, example built and run"
