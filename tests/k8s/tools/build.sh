#!/usr/bin/env bash
# Build the test control plane's binaries from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (wrapper
# module ./kubernetes), etcd
# (./etcd), kwok and helm (go install). Output: $DELAYQ_K8S_BIN (default
# ~/.cache/delayq-k8s/bin), outside the repo. A rerun with the same versions is a
# no-op; the Go module and build caches make a version bump cheap.
# Measured on the 2-core dev machine from empty caches: ~11 minutes in all.
set -euo pipefail
K8S_VERSION=1.35.4
ETCD_VERSION=3.6.16
KWOK_VERSION=0.8.0
HELM_VERSION=3.19.0

here=$(cd "$(dirname "$0")" && pwd)
bin=${DELAYQ_K8S_BIN:-$HOME/.cache/delayq-k8s/bin}
mkdir -p "$bin"
want="bins=5 k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION helm=$HELM_VERSION"
if [ -f "$bin/.versions" ] && [ "$(cat "$bin/.versions")" = "$want" ]; then
  echo "k8s test binaries up to date in $bin"
  exit 0
fi
export GOFLAGS=-mod=mod
minor=${K8S_VERSION#1.}; minor=${minor%%.*}
ld="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
ld="$ld -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ld="$ld -X k8s.io/component-base/version.gitTreeState=clean"
cd "$here/kubernetes"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  echo "building $cmd v$K8S_VERSION"
  go build -ldflags "$ld" -o "$bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
done
cd "$here/etcd"
echo "building etcd v$ETCD_VERSION"
go build -o "$bin/etcd" go.etcd.io/etcd/server/v3
echo "installing kwok v$KWOK_VERSION and helm v$HELM_VERSION"
GOBIN="$bin" go install "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
GOBIN="$bin" go install "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
echo "$want" > "$bin/.versions"
"$bin/kube-apiserver" --version
