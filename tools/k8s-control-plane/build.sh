#!/usr/bin/env bash
# Build the real Kubernetes control plane from the Go module proxy (make k8s-control-plane):
# kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes, the version
# go.mod pins) and etcd (go.etcd.io/etcd/server/v3, through etcd/main.go).
#
#     tools/k8s-control-plane/build.sh [--force]
#
# Everything lives outside the clone, under $KRAFT_K8S_CACHE (default
# ~/.cache/kraft-quorum/k8s): the Go module cache (gopath/), the build cache (gocache/) and
# the binaries (bin/). A stamp there names the hash of go.mod and go.sum, so a second run
# with the same pins does nothing and a clean clone reuses the binaries.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KRAFT_K8S_CACHE:-$HOME/.cache/kraft-quorum/k8s}"
bin="$cache/bin"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    *) echo "build.sh: unknown argument '$arg' (only --force is accepted)" >&2; exit 2 ;;
  esac
done

# a pin is either inside a require block ("MODULE VERSION") or on a line of its own
pin() { awk -v m="$1" '$1==m{print $2; exit} $1=="require" && $2==m{print $3; exit}' "$here/go.mod"; }
k8s_version="$(pin k8s.io/kubernetes)"
etcd_version="$(pin go.etcd.io/etcd/server/v3)"
[[ "$k8s_version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || {
  echo "build.sh: cannot read the k8s.io/kubernetes version from $here/go.mod (got '$k8s_version')" >&2; exit 1; }
k8s_minor="${BASH_REMATCH[1]}"
pins="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
stamp="$bin/.built-$pins"
if (( force == 0 )) && [[ -f "$stamp" ]]; then
  echo "control plane $k8s_version (etcd $etcd_version) already built in $bin"
  exit 0
fi
# One build at a time per cache: a second run (another clone's make test) waits for the first
# and then reuses what it built, instead of both writing the same files.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  echo "another build of the control plane is running in $cache: waiting for it"
  flock 9
fi
if (( force == 0 )) && [[ -f "$stamp" ]]; then
  echo "control plane $k8s_version (etcd $etcd_version) built meanwhile in $bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: 'go' is not on PATH. The control plane is built from Go modules and needs" >&2
  echo "Go 1.25 or newer (https://go.dev/dl/); put its bin/ on PATH and run again." >&2
  exit 1
fi
go_version="$(go env GOVERSION)"            # e.g. go1.26.8
minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$go_version")"
if ! [[ "$minor" =~ ^[0-9]+$ ]] || (( minor < 25 )); then
  echo "build.sh: $go_version is too old: the k8s.io/kubernetes that go.mod pins needs Go 1.25 or newer" >&2
  exit 1
fi

export GOPATH="$cache/gopath" GOMODCACHE="$cache/gopath/pkg/mod" GOCACHE="$cache/gocache"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
mkdir -p "$bin" "$GOCACHE" "$GOMODCACHE"
cd "$here"

start=$SECONDS
echo "downloading the modules of k8s.io/kubernetes $k8s_version and etcd $etcd_version into $GOMODCACHE"
go mod download
echo "  modules ready after $((SECONDS - start)) s"

# The version the binaries report: without these, k8s.io/component-base/version says v0.0.0.
# The build date is the tag's time as the module proxy records it, so two builds agree.
tag_time="$(go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' "k8s.io/kubernetes")"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$tag_time"

targets=(
  "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler"
  "etcd ./etcd"
)
n=0
for t in "${targets[@]}"; do
  read -r name path <<<"$t"
  n=$((n + 1))
  t0=$SECONDS
  echo "[$n/${#targets[@]}] building $name ($path) ..."
  nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$path"
  mv "$bin/$name.tmp" "$bin/$name"
  echo "      $name built in $((SECONDS - t0)) s ($(du -h "$bin/$name" | cut -f1))"
done

reported="$("$bin/kube-apiserver" --version)"
if [[ "$reported" != "Kubernetes $k8s_version" ]]; then
  echo "build.sh: kube-apiserver --version says '$reported', not 'Kubernetes $k8s_version'" >&2
  exit 1
fi
echo "$reported"
"$bin/etcd" --version | head -1
rm -f "$bin"/.built-*
touch "$stamp"
echo "control plane built in $((SECONDS - start)) s into $bin; caches: $(du -sh "$cache" | cut -f1) in $cache"
