#!/usr/bin/env bash
# Installs a Lua interpreter (Debian's lua5.4) for the Argo CD health-check test, unless one is there.
set -euo pipefail
for lua in lua5.4 lua5.3 lua5.1 lua; do
  if command -v "$lua" >/dev/null 2>&1; then
    exit 0
  fi
done
"$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" lua5.4
command -v lua5.4
