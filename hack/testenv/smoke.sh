#!/usr/bin/env bash
# Smoke test of the binaries from build.sh: starts etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok on loopback (free ports,
# temp dir, self-signed certs via openssl), creates a kwok-managed fake node
# and an unmanaged one, schedules a pod onto the fake node, checks kwok marks
# it Running, deletes it, and stops everything. Needs openssl, curl, python3.
#   hack/testenv/smoke.sh            (KEEP=1 keeps the temp dir for inspection)
# KWOK_SELECTOR picks how kwok selects its nodes (the fake node carries both):
#   KWOK_SELECTOR=--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$("$here/build.sh" | tail -1)"
K8S_VERSION="${K8S_VERSION:-$(basename "$(dirname "$BIN")")}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/ksched-smoke.XXXXXX")"
pids=()

log() { printf 'smoke: %s\n' "$*" >&2; }
# stop <pid>: SIGTERM, then SIGKILL after 15s.
stop() {
	local pid="$1" watchdog start=$SECONDS name
	name="$(cat "/proc/$pid/comm" 2>/dev/null || echo "pid $pid")"
	kill "$pid" 2>/dev/null || return 0
	(sleep 15 && kill -KILL "$pid" 2>/dev/null) &
	watchdog=$!
	wait "$pid" 2>/dev/null || true
	kill "$watchdog" 2>/dev/null || true
	wait "$watchdog" 2>/dev/null || true
	log "stopped $name in $((SECONDS - start))s"
}
cleanup() {
	local rc=$? i
	# Stop in reverse start order, etcd last: kube-apiserver hangs in its
	# shutdown (for minutes) when etcd is already gone.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}"; done
	if [[ $rc -ne 0 ]]; then
		log "FAILED (rc=$rc); last log lines:"
		for f in "$tmp"/*.log; do [[ -f "$f" ]] && { echo "== $f" >&2; tail -n 15 "$f" >&2; }; done
	fi
	if [[ -n "${KEEP:-}" ]]; then log "kept $tmp"; else rm -rf "$tmp"; fi
	exit $rc
}
trap cleanup EXIT

# wait_for <seconds> <description> <command...>
wait_for() {
	local secs="$1" what="$2"
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || { log "timed out waiting for $what"; return 1; }
		sleep 0.5
	done
	log "$what: ok ($((SECONDS - deadline + secs))s)"
}

read -r etcd_client etcd_peer apiserver_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# --- certificates -----------------------------------------------------------
pki="$tmp/pki"
mkdir -p "$pki"
(
	cd "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj "/CN=ksched-test-ca" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >apiserver.ext
	openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >admin.ext
	openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile admin.ext -out admin.crt 2>/dev/null
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)

kubeconfig="$tmp/kubeconfig"
KUBECONFIG="$kubeconfig"
export KUBECONFIG
"$BIN/kubectl" config set-cluster test --server="https://127.0.0.1:${apiserver_port}" \
	--certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
"$BIN/kubectl" config set-credentials admin --client-certificate="$pki/admin.crt" \
	--client-key="$pki/admin.key" --embed-certs=true >/dev/null
"$BIN/kubectl" config set-context test --cluster=test --user=admin >/dev/null
"$BIN/kubectl" config use-context test >/dev/null
k() { "$BIN/kubectl" "$@"; }

# --- etcd ---------------------------------------------------------------------
"$BIN/etcd" \
	--name=default \
	--data-dir="$tmp/etcd" \
	--listen-client-urls="http://127.0.0.1:${etcd_client}" \
	--advertise-client-urls="http://127.0.0.1:${etcd_client}" \
	--listen-peer-urls="http://127.0.0.1:${etcd_peer}" \
	--initial-advertise-peer-urls="http://127.0.0.1:${etcd_peer}" \
	--initial-cluster="default=http://127.0.0.1:${etcd_peer}" \
	--unsafe-no-fsync \
	--log-level=warn \
	>"$tmp/etcd.log" 2>&1 &
pids+=($!)
wait_for 30 "etcd /health" curl -fsS "http://127.0.0.1:${etcd_client}/health"

# --- kube-apiserver -------------------------------------------------------------
"$BIN/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:${etcd_client}" \
	--bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 \
	--endpoint-reconciler-type=none \
	--secure-port="${apiserver_port}" \
	--cert-dir="$tmp/apiserver-certs" \
	--tls-cert-file="$pki/apiserver.crt" \
	--tls-private-key-file="$pki/apiserver.key" \
	--client-ca-file="$pki/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$pki/sa.pub" \
	--service-account-signing-key-file="$pki/sa.key" \
	--service-cluster-ip-range=10.96.0.0/16 \
	--authorization-mode=Node,RBAC \
	--allow-privileged=true \
	>"$tmp/kube-apiserver.log" 2>&1 &
pids+=($!)
readyz() {
	[[ "$(curl -sS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
		"https://127.0.0.1:${apiserver_port}/readyz")" == ok ]]
}
wait_for 90 "kube-apiserver /readyz" readyz
version="$(k get --raw /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')"
[[ "$version" == "v${K8S_VERSION}" ]] || { log "/version says $version, want v${K8S_VERSION}"; exit 1; }
log "/version: $version"

# --- controller manager, scheduler ----------------------------------------------
"$BIN/kube-controller-manager" \
	--kubeconfig="$kubeconfig" \
	--authentication-kubeconfig="$kubeconfig" \
	--authorization-kubeconfig="$kubeconfig" \
	--bind-address=127.0.0.1 \
	--secure-port=0 \
	--leader-elect=false \
	--service-account-private-key-file="$pki/sa.key" \
	--root-ca-file="$pki/ca.crt" \
	--flex-volume-plugin-dir="$tmp/flexvolume" \
	--use-service-account-credentials=true \
	>"$tmp/kube-controller-manager.log" 2>&1 &
pids+=($!)
"$BIN/kube-scheduler" \
	--kubeconfig="$kubeconfig" \
	--authentication-kubeconfig="$kubeconfig" \
	--authorization-kubeconfig="$kubeconfig" \
	--bind-address=127.0.0.1 \
	--secure-port=0 \
	--leader-elect=false \
	>"$tmp/kube-scheduler.log" 2>&1 &
pids+=($!)

# --- kwok -------------------------------------------------------------------------
KWOK_WORKDIR="$tmp/kwok" "$BIN/kwok" \
	--kubeconfig="$kubeconfig" \
	--config="$here/kwok-stages.yaml" \
	--manage-all-nodes=false \
	"${KWOK_SELECTOR:---manage-nodes-with-label-selector=kwok.x-k8s.io/node=fake}" \
	--node-lease-duration-seconds=40 \
	>"$tmp/kwok.log" 2>&1 &
pids+=($!)

k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: fake-1
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kwok.x-k8s.io/node: fake
    type: kwok
---
apiVersion: v1
kind: Node
metadata:
  name: unmanaged-1
EOF
wait_for 60 "kwok marks node fake-1 Ready" k wait --for=condition=Ready node/fake-1 --timeout=1s
wait_for 30 "kwok renews Lease kube-node-lease/fake-1" k -n kube-node-lease get lease fake-1
if [[ -n "$(k get node unmanaged-1 -o jsonpath='{.status.conditions}')" ]]; then
	log "unmanaged-1 got status conditions: kwok should not manage it"
	exit 1
fi
log "unmanaged-1 left alone: ok"

wait_for 60 "default ServiceAccount" k -n default get serviceaccount default
k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: scheduled
  namespace: default
spec:
  nodeSelector:
    type: kwok
  containers:
  - name: c
    image: registry.invalid/none:latest
---
apiVersion: v1
kind: Pod
metadata:
  name: prebound
  namespace: default
spec:
  nodeName: fake-1
  containers:
  - name: c
    image: registry.invalid/none:latest
EOF
running() { [[ "$(k -n default get pod "$1" -o jsonpath='{.status.phase}')" == Running ]]; }
wait_for 60 "pod scheduled -> Running" running scheduled
[[ "$(k -n default get pod scheduled -o jsonpath='{.spec.nodeName}')" == fake-1 ]]
wait_for 30 "pod prebound -> Running" running prebound
k -n default get pods -o wide >&2
k -n default delete pod scheduled prebound --wait=true --timeout=60s >/dev/null
log "pods deleted: ok"
log "PASSED"
