#!/usr/bin/env bash
# Installs Debian packages with apt-get (through sudo when not root), waiting for another apt's lock;
# runs `apt-get update` only when installing from the current package lists fails.
#   hack/apt-install.sh PACKAGE...
set -euo pipefail
if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here: install $* by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
apt=($sudo apt-get -o DPkg::Lock::Timeout=600 -y -qq)
if ! "${apt[@]}" install --no-install-recommends "$@" >/dev/null 2>&1; then
  "${apt[@]}" update
  "${apt[@]}" install --no-install-recommends "$@" >/dev/null
fi
