#!/usr/bin/env bash
# Installs Debian's docker-registry (the CNCF distribution registry, v2 API, which also stores OCI
# artifacts such as Helm charts) and skopeo (copies an OCI archive into a registry without a
# daemon), which the registry e2e test uses, unless they are there already. The tests start the
# registry themselves on loopback with a configuration of their own; the package's system service
# is not needed (nothing here enables or starts it).
set -euo pipefail
if ! command -v docker-registry >/dev/null 2>&1 || ! command -v skopeo >/dev/null 2>&1; then
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" docker-registry skopeo
fi
command -v docker-registry
