#!/usr/bin/env bash
# Builds the Kubernetes test control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok), helm (for the chart
# tests) and kstatus-check (Flux's and Helm's health reading, for the status
# tests) from Go modules into
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ksched/testenv/<K8S_VERSION>/bin/
# and prints that directory as the last line of stdout:
#   BIN=$(hack/testenv/build.sh | tail -1)
# Progress goes to stderr. When the binaries and a matching stamp are already
# there it returns at once, without running go.
#
# K8S_VERSION (e.g. 1.36.3, no leading v) comes from the top-level Makefile;
# the default below is only a fallback and must match k8s/go.mod.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.36.3}"
K8S_VERSION="${K8S_VERSION#v}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${XDG_CACHE_HOME:-$HOME/.cache}/ksched/testenv/${K8S_VERSION}"
bin="${root}/bin"
stamp="${bin}/.stamp"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kstatus-check)

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Everything that decides what the binaries are: this script (build flags) and
# the five modules' go.mod / go.sum / Go sources.
inputs_hash() {
	(
		cd "$here"
		printf 'version=%s arch=%s\n' "$K8S_VERSION" "$(uname -sm)"
		for f in build.sh k8s/go.mod k8s/go.sum k8s/*.go etcd/go.mod etcd/go.sum etcd/*.go \
			kwok/go.mod kwok/go.sum kwok/*.go helm/go.mod helm/go.sum helm/*.go \
			kstatus/go.mod kstatus/go.sum kstatus/*.go; do
			printf '%s ' "$f"
			sha256sum <"$f"
		done
	) | sha256sum | cut -d' ' -f1
}

up_to_date() {
	[[ -f "$stamp" ]] || return 1
	local b
	for b in "${binaries[@]}"; do
		[[ -x "${bin}/${b}" ]] || return 1
	done
	[[ "$(cat "$stamp")" == "${K8S_VERSION} $(inputs_hash)" ]]
}

if up_to_date; then
	echo "$bin"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH"

# The k8s module pins the version; K8S_VERSION must agree with it.
pinned="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?k8s\.io\/kubernetes[[:space:]]+v([0-9][^[:space:]]*).*/\2/p' "${here}/k8s/go.mod" | head -1)"
[[ "$pinned" == "$K8S_VERSION" ]] ||
	die "K8S_VERSION=${K8S_VERSION} but hack/testenv/k8s/go.mod pins k8s.io/kubernetes v${pinned}; run hack/testenv/set-version.sh ${K8S_VERSION}"

mkdir -p "$bin"
# Serialise concurrent callers (e.g. parallel test binaries); the winner
# builds, the others find the stamp afterwards.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${root}/.lock"
	flock -n 9 || { log "waiting for another build.sh (lock ${root}/.lock)"; flock 9; }
	if up_to_date; then
		echo "$bin"
		exit 0
	fi
fi

major="${K8S_VERSION%%.*}"
minor="${K8S_VERSION#*.}"
minor="${minor%%.*}"

export GOTOOLCHAIN=local     # never download a toolchain
export CGO_ENABLED=0         # static binaries, as upstream releases them
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOWORK=off

rm -f "$stamp" "$bin"/.*.tmp.* # stamp last written, leftovers of interrupted builds
log "building Kubernetes v${K8S_VERSION} test binaries into ${bin} ($(go env GOVERSION), a cold build takes ~15-20 min on 2 cores)"

# go_build <dir> <name> <package> [ldflags...]
go_build() {
	local dir="$1" name="$2" pkg="$3"
	shift 3
	local tmp="${bin}/.${name}.tmp.$$"
	local start=$SECONDS
	log "go build ${pkg} -> ${name}"
	rm -f "$tmp"
	if ! (cd "${here}/${dir}" && go build -p 2 -trimpath -ldflags "-s -w $*" -o "$tmp" "$pkg" >&2); then
		rm -f "$tmp"
		die "building ${name} failed"
	fi
	mv -f "$tmp" "${bin}/${name}"
	log "built ${name} in $((SECONDS - start))s"
}

kv="k8s.io/component-base/version"
cv="k8s.io/client-go/pkg/version"
k8s_ldflags=()
for p in "$kv" "$cv"; do
	k8s_ldflags+=(
		"-X ${p}.gitVersion=v${K8S_VERSION}"
		"-X ${p}.gitMajor=${major}"
		"-X ${p}.gitMinor=${minor}"
		"-X ${p}.gitTreeState=clean"
		"-X ${p}.gitCommit="
	)
done

etcd_version="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?go\.etcd\.io\/etcd\/server\/v3[[:space:]]+v([^[:space:]]+).*/\2/p' "${here}/etcd/go.mod" | head -1)"

go_build etcd etcd . "-X go.etcd.io/etcd/api/v3/version.GitSHA=gomod-v${etcd_version}"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	go_build k8s "$c" "k8s.io/kubernetes/cmd/${c}" "${k8s_ldflags[@]}"
done
go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok
helm_version="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?helm\.sh\/helm\/v4[[:space:]]+v([^[:space:]]+).*/\2/p' "${here}/helm/go.mod" | head -1)"
go_build helm helm helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=v${helm_version}"
go_build kstatus kstatus-check .

printf '%s %s\n' "$K8S_VERSION" "$(inputs_hash)" >"${stamp}.tmp.$$"
mv -f "${stamp}.tmp.$$" "$stamp"
log "done"
echo "$bin"
