#!/usr/bin/env bash
# build-kube.sh builds kube-apiserver, etcd and kubectl for morph's
# end-to-end tests from the sources pinned in hack/kube/go.mod, caches them
# per version and prints the directory that holds them (the only line on
# stdout; progress goes to stderr).
#
#   hack/build-kube.sh            # build or reuse, print the directory
#   KUBE_VERSION=v1.37.1 MORPH_E2E_CACHE=/some/dir hack/build-kube.sh
#
# Environment:
#   KUBE_VERSION     Kubernetes version; must match hack/kube/go.mod (default v1.37.1)
#   MORPH_E2E_CACHE  cache root (default $HOME/.cache/morph-e2e)
#   KUBE_BUILD_P     go build -p value (default 2)
#   KUBE_REBUILD=1   ignore cached binaries and rebuild
#
# The cached binaries are reused when all three exist and report the expected
# version. Otherwise they are built with CGO_ENABLED=0 -trimpath into a
# temporary directory and moved into place only after they pass the same
# version check. Concurrent invocations serialise on a lock file. Any failure
# exits non-zero with a message on stderr; nothing is ever skipped silently.
set -euo pipefail

log() { printf 'build-kube: %s\n' "$*" >&2; }
die() { printf 'build-kube: ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODDIR="${ROOT}/hack/kube"
KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
CACHE_ROOT="${MORPH_E2E_CACHE:-${HOME}/.cache/morph-e2e}"
OUT="${CACHE_ROOT}/${KUBE_VERSION}"
ETCD_VERSION_WANT="3.7.0"

command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ -f "${MODDIR}/go.mod" ]] || die "${MODDIR}/go.mod not found"

# The module pins exactly one Kubernetes version; refuse to label a build of
# that version with another one.
pinned="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "${MODDIR}/go.mod")"
[[ "${pinned}" == "${KUBE_VERSION}" ]] ||
	die "KUBE_VERSION=${KUBE_VERSION} but hack/kube/go.mod pins k8s.io/kubernetes ${pinned:-<none>}; edit hack/kube/go.mod (and its replace block) to change versions"

# check_dir DIR: succeeds when DIR holds all three binaries at the expected versions.
check_dir() {
	local dir="$1" out
	[[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" && -x "${dir}/kubectl" ]] || return 1
	out="$("${dir}/kube-apiserver" --version 2>&1)" || return 1
	[[ "${out}" == "Kubernetes ${KUBE_VERSION}" ]] || { log "${dir}/kube-apiserver --version: ${out}"; return 1; }
	out="$("${dir}/kubectl" version --client 2>&1)" || return 1
	grep -qx "Client Version: ${KUBE_VERSION}" <<<"${out}" || { log "${dir}/kubectl version --client: ${out}"; return 1; }
	out="$("${dir}/etcd" --version 2>&1)" || return 1
	grep -qx "etcd Version: ${ETCD_VERSION_WANT}" <<<"${out}" || { log "${dir}/etcd --version: ${out}"; return 1; }
	return 0
}

if [[ "${KUBE_REBUILD:-0}" != 1 ]] && check_dir "${OUT}"; then
	log "reusing cached binaries in ${OUT}"
	echo "${OUT}"
	exit 0
fi

mkdir -p "${CACHE_ROOT}" || die "cannot create cache root ${CACHE_ROOT}"

# Serialise concurrent builds (e.g. two go test processes) on one lock.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${CACHE_ROOT}/.build-${KUBE_VERSION}.lock"
	log "waiting for build lock ${CACHE_ROOT}/.build-${KUBE_VERSION}.lock"
	flock 9 || die "cannot take build lock"
	# Somebody else may have finished the build while we waited.
	if [[ "${KUBE_REBUILD:-0}" != 1 ]] && check_dir "${OUT}"; then
		log "reusing cached binaries in ${OUT}"
		echo "${OUT}"
		exit 0
	fi
fi

TMP="$(mktemp -d "${CACHE_ROOT}/.build-${KUBE_VERSION}.XXXXXX")"
trap 'rm -rf "${TMP}"' EXIT

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	ldflags+=" -X ${pkg}.gitMajor=$(cut -d. -f1 <<<"${KUBE_VERSION#v}")"
	ldflags+=" -X ${pkg}.gitMinor=$(cut -d. -f2 <<<"${KUBE_VERSION}")"
	ldflags+=" -X ${pkg}.gitTreeState=clean"
done

# Build flags: the same tags as upstream's release builds; GOWORK=off and an
# explicit GOFLAGS so that a workspace or the caller's GOFLAGS cannot change
# what is compiled.
build() {
	(cd "${MODDIR}" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
		go build -trimpath -p "${KUBE_BUILD_P:-2}" -tags selinux,notest,grpcnotrace \
		-ldflags "${ldflags}" "$@")
}

start=${SECONDS}
log "building kube-apiserver, kubectl ${KUBE_VERSION} and etcd ${ETCD_VERSION_WANT} into ${OUT} (a cold build takes several minutes)"
build -o "${TMP}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ||
	die "go build of kube-apiserver/kubectl failed (module ${MODDIR})"
build -o "${TMP}/etcd" go.etcd.io/etcd/server/v3 ||
	die "go build of etcd failed (module ${MODDIR})"
check_dir "${TMP}" || die "freshly built binaries in ${TMP} fail the version check"

mkdir -p "${OUT}"
for b in kube-apiserver etcd kubectl; do
	mv -f "${TMP}/${b}" "${OUT}/${b}" || die "cannot move ${b} into ${OUT}"
done
check_dir "${OUT}" || die "binaries in ${OUT} fail the version check after install"
log "built in $((SECONDS - start))s"
echo "${OUT}"
