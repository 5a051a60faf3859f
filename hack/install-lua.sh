#!/usr/bin/env bash
# Installs a Lua interpreter (Debian's lua5.4) for the Argo CD health-check test, unless one is there.
set -euo pipefail
for lua in lua5.4 lua5.3 lua5.1 lua; do
  if command -v "$lua" >/dev/null 2>&1; then
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no Lua interpreter and no apt-get: install lua5.4 (or lua5.3) by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y -qq lua5.4 >/dev/null 2>&1; then
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq lua5.4 >/dev/null
fi
command -v lua5.4
