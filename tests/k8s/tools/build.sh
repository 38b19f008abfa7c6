#!/usr/bin/env bash
# Build the test control plane's binaries from the Go module proxy, in one `go
# build` of one module (go.mod here), so that the packages they share compile
# once: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and
# helm. Output: $DELAYQ_K8S_BIN (default ~/.cache/delayq-k8s/bin), outside the
# repo. A rerun with the same go.mod is a no-op; the Go module and build caches
# make a change cheap. No debug symbols (-s -w): the linker's largest cost, and
# nothing here debugs the binaries.
#
#   build.sh          build unless up to date
#   build.sh --check  exit 0 when up to date, 1 when a build is due
#
# Measured on the 2-core dev machine from empty caches: see tests/k8s/README.md.
set -euo pipefail
K8S_VERSION=1.35.4

here=$(cd "$(dirname "$0")" && pwd)
bin=${DELAYQ_K8S_BIN:-$HOME/.cache/delayq-k8s/bin}
want="$(cat "$here/go.mod" "$here/build.sh" | sha1sum | cut -c1-16)"
up_to_date() { [ -f "$bin/.versions" ] && [ "$(cat "$bin/.versions")" = "$want" ]; }
if [ "${1:-}" = "--check" ]; then
  up_to_date
  exit
fi
if up_to_date; then
  echo "k8s test binaries up to date in $bin"
  exit 0
fi
mkdir -p "$bin"
rm -f "$bin/.versions"
minor=${K8S_VERSION#1.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
ld="$ld -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ld="$ld -X k8s.io/component-base/version.gitTreeState=clean"
cd "$here"
echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and helm"
out=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -ldflags "$ld" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  go.etcd.io/etcd/server/v3 \
  helm.sh/helm/v3/cmd/helm
mv "$out/server" "$out/etcd"  # (go build names etcd's main package after its directory)
mv "$out"/* "$bin/"
echo "$want" > "$bin/.versions"
"$bin/kube-apiserver" --version
