#!/usr/bin/env bash
# Installs podman with runc, jq and curl (Debian's packages), which `make image`, the image e2e
# test and the test support's podman node use (curl runs its HTTP probes inside a pod's network
# namespace), unless they are there already. Debian's crun fails on hosts with hybrid cgroups; runc
# works, so every podman call in this project passes `--runtime runc`.
set -euo pipefail
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 ||
  ! command -v jq >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" podman runc jq curl
fi
command -v podman
