#!/usr/bin/env bash
# Builds the real control plane from Kubernetes' and etcd's own Go modules, as
# pinned by tests/real-k8s/go.mod and go.sum:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes/cmd/...)
#   etcd (go.etcd.io/etcd/server/v3, etcd's own main package)
# into <repository root>/target/real-k8s/bin/ (whatever CARGO_TARGET_DIR says).
#
# stdout: exactly one line, that directory. Everything else goes to stderr.
# Incremental: when the inputs (go.mod, go.sum, tools.go, this script, the Go
# version) are unchanged and every binary is there, nothing is built; otherwise
# Go's build cache makes a rebuild cost only what changed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/target/real-k8s/bin"

die() { echo "tests/real-k8s/build.sh: $*" >&2; exit 1; }

# --- the toolchain: Go 1.26.x, never a downloaded one ------------------------
command -v go >/dev/null 2>&1 ||
  die "'go' is not on PATH; install Go 1.26.x (the project's machines have 1.26.8 in /usr/local/go/bin)"
# GOTOOLCHAIN=local: a module that asks for a newer Go fails the build instead
# of making the go command download a toolchain.
export GOTOOLCHAIN=local
goversion=$(go env GOVERSION 2>/dev/null) || die "'go env GOVERSION' failed; is $(command -v go) a working Go installation?"
case "$goversion" in
  go1.26 | go1.26.*) ;;
  *) die "need Go 1.26.x, found $goversion at $(command -v go). Go 1.27 turns on the jsonv2 experiment, which breaks kube-apiserver's OpenAPI (client-side 'kubectl apply' then fails with 'failed to download openapi')" ;;
esac

# jsonv2 must stay off whatever the caller's environment says (see above).
export GOEXPERIMENT=nojsonv2
# go.mod and go.sum are the pins: never rewrite them while building.
export GOFLAGS="-mod=readonly"
# The module proxy, and unless the caller set GOPROXY not "direct" (which
# would fetch from VCS hosts).
export GOPROXY="${GOPROXY:-https://proxy.golang.org}"
# Pure-Go static binaries, as Kubernetes' own release builds of these commands.
export CGO_ENABLED=0

cd "$here"

k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes) || die "cannot read k8s.io/kubernetes' version from go.mod"
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) || die "cannot read etcd's version from go.mod"
# v1.37.2 -> major 1, minor 37 (what hack/lib/version.sh derives from the git tag)
ver=${k8s_version#v}
major=${ver%%.*}
rest=${ver#*.}
minor=${rest%%.*}

# The version variables that Kubernetes' hack/lib/version.sh sets, so that
# `kubectl version` and the apiserver's /version say v1.37.x instead of
# v0.0.0-master. No git commit is known for a module download, so the tree
# state is "archive", as for a build from a source tarball.
build_date=$(date -u -d "@$(go list -m -f '{{.Time.Unix}}' k8s.io/kubernetes 2>/dev/null || echo 0)" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo 1970-01-01T00:00:00Z)
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X '$pkg.gitVersion=$k8s_version'"
  ldflags+=" -X '$pkg.gitMajor=$major'"
  ldflags+=" -X '$pkg.gitMinor=$minor'"
  ldflags+=" -X '$pkg.gitTreeState=archive'"
  ldflags+=" -X '$pkg.buildDate=$build_date'"
done
etcd_ldflags="-s -w -X 'go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version'"

binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)

# Skip everything when nothing that goes into the binaries changed.
stamp="$out/.build-inputs"
inputs=$(
  {
    echo "$goversion $GOEXPERIMENT $CGO_ENABLED"
    echo "$ldflags"
    echo "$etcd_ldflags"
    cat go.mod go.sum tools.go build.sh
  } | sha256sum | cut -d' ' -f1
)
all_there=true
for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || all_there=false; done
if $all_there && [[ -f "$stamp" && "$(cat "$stamp")" == "$inputs" ]]; then
  echo "tests/real-k8s/build.sh: up to date ($k8s_version, etcd $etcd_version) in $out" >&2
  echo "$out"
  exit 0
fi

mkdir -p "$out"
rm -f "$stamp"
start=$(date +%s)
echo "tests/real-k8s/build.sh: building Kubernetes $k8s_version and etcd $etcd_version with $goversion into $out" >&2
# Two cores shared with Rust builds: lowest priority. go build writes each
# main package's binary under its last path element into "$out/".
nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl >&2
nice -n 19 go build -trimpath -ldflags "$etcd_ldflags" -o "$out/etcd" go.etcd.io/etcd/server/v3 >&2
echo "$inputs" >"$stamp"
echo "tests/real-k8s/build.sh: built in $(($(date +%s) - start)) s" >&2
echo "$out"
