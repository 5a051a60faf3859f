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
# K8S_VERSION (e.g. 1.37.2, no leading v): any release whose minor has its
# modules in v<major>.<minor>/ (written by set-version.sh); unset, the pin of
# the top-level Makefile. Several versions build side by side, each into its
# own directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${K8S_VERSION:-}" ]]; then
	K8S_VERSION="$(sed -n -E 's/^K8S_VERSION[[:space:]]*\??=[[:space:]]*([^[:space:]]+).*/\1/p' "${here}/../../Makefile" | head -1)"
fi
K8S_VERSION="${K8S_VERSION#v}"
[[ "$K8S_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "testenv: error: K8S_VERSION=${K8S_VERSION} is not a release version" >&2; exit 1; }
modules="v${K8S_VERSION%.*}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/ksched/testenv/${K8S_VERSION}"
bin="${root}/bin"
stamp="${bin}/.stamp"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kstatus-check)

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Everything that decides what the binaries are: this script (build flags) and
# the go.mod / go.sum / Go sources of the five modules this version builds from
# (another minor's modules are not among them).
inputs_hash() {
	(
		cd "$here"
		printf 'version=%s arch=%s\n' "$K8S_VERSION" "$(uname -sm)"
		for f in build.sh "$modules"/k8s/go.mod "$modules"/k8s/go.sum "$modules"/k8s/*.go \
			"$modules"/etcd/go.mod "$modules"/etcd/go.sum "$modules"/etcd/*.go \
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

# The minor's k8s module pins the patch release; K8S_VERSION must agree with it.
[[ -f "${here}/${modules}/k8s/go.mod" ]] ||
	die "no modules for Kubernetes ${K8S_VERSION%.*} (hack/testenv/${modules}/); run hack/testenv/set-version.sh ${K8S_VERSION}"
pinned="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?k8s\.io\/kubernetes[[:space:]]+v([0-9][^[:space:]]*).*/\2/p' "${here}/${modules}/k8s/go.mod" | head -1)"
[[ "$pinned" == "$K8S_VERSION" ]] ||
	die "K8S_VERSION=${K8S_VERSION} but hack/testenv/${modules}/k8s/go.mod pins k8s.io/kubernetes v${pinned}; run hack/testenv/set-version.sh ${K8S_VERSION}"

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

etcd_version="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?go\.etcd\.io\/etcd\/server\/v3[[:space:]]+v([^[:space:]]+).*/\2/p' "${here}/${modules}/etcd/go.mod" | head -1)"

go_build "${modules}/etcd" etcd . "-X go.etcd.io/etcd/api/v3/version.GitSHA=gomod-v${etcd_version}"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	go_build "${modules}/k8s" "$c" "k8s.io/kubernetes/cmd/${c}" "${k8s_ldflags[@]}"
done
go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok
helm_version="$(sed -n -E 's/^[[:space:]]*(require[[:space:]]+)?helm\.sh\/helm\/v4[[:space:]]+v([^[:space:]]+).*/\2/p' "${here}/helm/go.mod" | head -1)"
go_build helm helm helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=v${helm_version}"
go_build kstatus kstatus-check .

printf '%s %s\n' "$K8S_VERSION" "$(inputs_hash)" >"${stamp}.tmp.$$"
mv -f "${stamp}.tmp.$$" "$stamp"
log "done"
echo "$bin"
