#!/usr/bin/env bash
# Builds the ksched image from a built BINARY with podman, with no Docker daemon and no registry
# (the base is `scratch`), and writes it as an OCI archive to ARCHIVE, named NAME:TAG:
#   hack/image.sh BINARY ARCHIVE NAME:TAG
# The archive is an OCI image layout (index.json, blobs/) that also carries docker's manifest.json,
# as `docker save` writes since Docker 25, so `podman load`, `docker load` and
# `kind load image-archive` (containerd) all accept it.
#
# podman runs on a private, throwaway storage (vfs driver, runc, cgroupfs), so it neither needs
# nor touches the host's container storage; `make image` and the image e2e test call this.
# SOURCE_DATE_EPOCH (default: the last commit's time) fixes the image's timestamps.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 BINARY ARCHIVE NAME:TAG" >&2
  exit 2
fi
binary="$1"
archive="$2"
ref="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"$here/install-podman.sh" >/dev/null

# The name docker and containerd give NAME:TAG (docker.io/library/ksched:0.1.0 for ksched:0.1.0).
name="${ref%:*}"
tag="${ref##*:}"
case "$name" in
  */*) first="${name%%/*}"
       case "$first" in
         *.*|*:*|localhost) full="$name" ;;
         *) full="docker.io/$name" ;;
       esac ;;
  *) full="docker.io/library/$name" ;;
esac

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$here/.." log -1 --format=%ct 2>/dev/null || echo 0)}"
version="$("$binary" version | awk '{print $2}')"

work="$(mktemp -d "${TMPDIR:-/tmp}/ksched-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/context" "$work/oci"
"$here/image-rootfs.sh" "$binary" "$work/context/rootfs"
cat >"$work/context/Containerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
USER 65532:65532
EXPOSE 8080 10259
ENTRYPOINT ["/usr/local/bin/ksched"]
EOF

podman=(podman --root "$work/storage" --runroot "$work/run" --tmpdir "$work/tmp"
  --storage-driver vfs --runtime runc --cgroup-manager cgroupfs --events-backend file)
"${podman[@]}" build --quiet --timestamp "$epoch" \
  --label org.opencontainers.image.title=ksched \
  --label "org.opencontainers.image.version=$version" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.description=Kubernetes operator managing scheduler profiles, and the scheduler they run" \
  -t "$ref" -f "$work/context/Containerfile" "$work/context" >/dev/null
"${podman[@]}" save --quiet --format oci-archive -o "$work/oci.tar" "$ref"

# Name the image as docker and containerd do, and add docker's manifest.json.
tar -xf "$work/oci.tar" -C "$work/oci"
cd "$work/oci"
manifest="$(jq -r '.manifests[0].digest | sub("^sha256:"; "blobs/sha256/")' index.json)"
jq -c --arg full "$full:$tag" --arg tag "$tag" \
  '.manifests[0].annotations = {"io.containerd.image.name": $full, "org.opencontainers.image.ref.name": $tag}' \
  index.json >index.json.new
mv index.json.new index.json
jq -c --arg ref "$ref" \
  '[{Config: (.config.digest | sub("^sha256:"; "blobs/sha256/")), RepoTags: [$ref],
     Layers: [.layers[].digest | sub("^sha256:"; "blobs/sha256/")]}]' \
  "$manifest" >manifest.json
cd - >/dev/null

mkdir -p "$(dirname "$archive")"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  -cf "$archive.tmp" -C "$work/oci" oci-layout index.json manifest.json blobs
mv -f "$archive.tmp" "$archive"
echo "$archive"
