#!/usr/bin/env bash
# Installs Prometheus and promtool (Debian's `prometheus` package) for the NetworkTraffic e2e test
# (tests/e2e_network_traffic.rs) and the chart's alert tests (tests/monitoring.rs), unless
# `prometheus` and `promtool` are already on PATH.
# `apt-get update` runs only when the package is not known to apt yet.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "prometheus: $(command -v prometheus)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

if ! apt-cache show prometheus >/dev/null 2>&1; then
  $SUDO apt-get update
fi
# The package's service is not needed (the test starts its own server); keep it from starting.
DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y --no-install-recommends prometheus
command -v prometheus
prometheus --version 2>&1 | head -1
