#!/usr/bin/env bash
# Installs podman with runc, and jq (Debian's packages), which `make image` and the image e2e test
# use, unless they are there already. Debian's crun fails on hosts with hybrid cgroups; runc works, so every
# podman call in this project passes `--runtime runc`.
set -euo pipefail
if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v jq >/dev/null 2>&1; then
  command -v podman
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "podman, runc and jq are needed for the image and no apt-get is here: install them by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
packages=(podman runc jq)
if ! $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1; then
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
command -v podman
