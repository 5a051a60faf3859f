#!/usr/bin/env bash
# Writes the kustomize install (manifests/install) from the Helm chart, so the chart is the one
# source of truth: each template rendered with the chart's defaults for namespace ksched-system
# becomes manifests/install/<template>.yaml. namespace.yaml, kustomization.yaml and crds/ are not
# generated (the chart has no Namespace; crds/ are copies of ../../crds, checked by a test).
#   hack/generate-manifests.sh [OUTPUT_DIR]      (default: manifests/install; `make manifests`)
# HELM (default: the testenv's helm, `make testenv` builds it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$root/manifests/install}"
helm="${HELM:-${KSCHED_TESTENV_BIN:?set HELM or KSCHED_TESTENV_BIN (the Makefile does)}/helm}"

work="$(mktemp -d "${TMPDIR:-/tmp}/ksched-manifests.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# helm keeps caches under these; nothing of the user's is read or written.
export HELM_CACHE_HOME="$work/helm" HELM_CONFIG_HOME="$work/helm" HELM_DATA_HOME="$work/helm"
# No hooks: kubectl apply -k would run the uninstall hook at install.
"$helm" template ksched "$root/charts/ksched" --namespace ksched-system --no-hooks --output-dir "$work/out" >/dev/null

mkdir -p "$out"
for f in "$work"/out/ksched/templates/*.yaml; do
  {
    echo "# Generated from charts/ksched/templates/$(basename "$f") by hack/generate-manifests.sh"
    echo "# (make manifests): edit the chart, not this file."
    cat "$f"
  } >"$out/$(basename "$f")"
done
