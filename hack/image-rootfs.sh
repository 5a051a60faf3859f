#!/usr/bin/env bash
# Lays out the root filesystem of the ksched image in DIR: the binary (debug info stripped, symbols
# kept for backtraces and profiles) and exactly the shared libraries it loads, at the paths its
# dynamic loader looks for them, plus the CA bundle and the nonroot user (65532).
#   hack/image-rootfs.sh BINARY DIR
# Used by `make image` (hack/image.sh) on the host and by the Dockerfile in its build stage, so both
# ship the same layout.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BINARY DIR" >&2
  exit 2
fi
binary="$1"
dir="$2"
[ -x "$binary" ] || { echo "$0: $binary is not an executable" >&2; exit 1; }

mkdir -p "$dir/usr/local/bin" "$dir/etc/ssl/certs"
strip --strip-debug -o "$dir/usr/local/bin/ksched" "$binary"

# `ldd` prints "name => /path (addr)" for libraries and "/path (addr)" for the loader; copy each
# file's contents (not the symlink) to the path the loader resolved.
ldd "$binary" | awk '/=> \// { print $3; next } /^[[:space:]]*\// { print $1 }' | while read -r lib; do
  mkdir -p "$dir$(dirname "$lib")"
  cp -L "$lib" "$dir$lib"
done

# For HTTPS endpoints signed by a public CA (the in-cluster API server comes with its own CA).
for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  if [ -f "$bundle" ]; then
    cp -L "$bundle" "$dir/etc/ssl/certs/ca-certificates.crt"
    break
  fi
done

printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
chmod -R u+rwX,go+rX,go-w "$dir"
