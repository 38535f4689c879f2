#!/usr/bin/env bash
# build-helm.sh builds the helm binary that morph's tests lint and render
# charts/morph with, from the sources pinned in hack/helm/go.mod, caches it per
# version and prints its path (the only line on stdout; progress goes to stderr).
#
#   hack/build-helm.sh            # build or reuse, print the binary's path
#   MORPH_E2E_CACHE=/some/dir hack/build-helm.sh
#
# Environment:
#   MORPH_E2E_CACHE  cache root (default $HOME/.cache/morph-e2e)
#   HELM_BUILD_P     go build -p value (default 2)
#   HELM_REBUILD=1   ignore the cached binary and rebuild
#
# The binary lives in ${MORPH_E2E_CACHE}/helm-<version>/helm, next to the kube
# binaries of hack/build-kube.sh. It is reused when it reports the pinned version;
# otherwise it is built with CGO_ENABLED=0 -trimpath into a temporary directory and
# moved into place only after it passes the same check. Concurrent invocations
# serialise on a lock file. Any failure exits non-zero with a message on stderr.
set -euo pipefail

log() { printf 'build-helm: %s\n' "$*" >&2; }
die() { printf 'build-helm: ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODDIR="${ROOT}/hack/helm"
CACHE_ROOT="${MORPH_E2E_CACHE:-${HOME}/.cache/morph-e2e}"
HELM_MODULE="helm.sh/helm/v4"

command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ -f "${MODDIR}/go.mod" && -f "${MODDIR}/go.sum" ]] || die "${MODDIR}/go.mod or go.sum not found"
pinned="$(awk -v m="${HELM_MODULE}" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "${MODDIR}/go.mod")"
[[ -n "${pinned}" ]] || die "hack/helm/go.mod does not require ${HELM_MODULE}"
OUT="${CACHE_ROOT}/helm-${pinned}"
BIN="${OUT}/helm"

# check_bin FILE: succeeds when FILE is a helm that reports the pinned version.
check_bin() {
	local out
	[[ -x "$1" ]] || return 1
	out="$("$1" version --template '{{.Version}}' 2>&1)" || { log "$1 version: ${out}"; return 1; }
	[[ "${out}" == "${pinned}" ]] || { log "$1 version: ${out}, want ${pinned}"; return 1; }
}

if [[ "${HELM_REBUILD:-0}" != 1 ]] && check_bin "${BIN}"; then
	log "reusing ${BIN}"
	echo "${BIN}"
	exit 0
fi

mkdir -p "${CACHE_ROOT}" || die "cannot create cache root ${CACHE_ROOT}"
if command -v flock >/dev/null 2>&1; then
	exec 9>"${CACHE_ROOT}/.build-helm.lock"
	log "waiting for build lock ${CACHE_ROOT}/.build-helm.lock"
	flock 9 || die "cannot take build lock"
	if [[ "${HELM_REBUILD:-0}" != 1 ]] && check_bin "${BIN}"; then
		log "reusing ${BIN}"
		echo "${BIN}"
		exit 0
	fi
fi

TMP="$(mktemp -d "${CACHE_ROOT}/.build-helm.XXXXXX")"
trap 'rm -rf "${TMP}"' EXIT

# Helm reports the version set in helm.sh/helm/v4/internal/version; without it,
# `helm version` says v4.x-dev-ish and charts with a kubeVersion constraint misjudge.
ldflags="-s -w -X ${HELM_MODULE}/internal/version.version=${pinned} -X ${HELM_MODULE}/internal/version.gitTreeState=clean"
start=${SECONDS}
log "building helm ${pinned} into ${OUT} (a cold build takes a few minutes)"
(cd "${MODDIR}" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
	go build -trimpath -p "${HELM_BUILD_P:-2}" -ldflags "${ldflags}" -o "${TMP}/helm" "${HELM_MODULE}/cmd/helm") ||
	die "go build of helm failed (module ${MODDIR})"
check_bin "${TMP}/helm" || die "the freshly built ${TMP}/helm fails the version check"
mkdir -p "${OUT}"
mv -f "${TMP}/helm" "${BIN}" || die "cannot move helm into ${OUT}"
log "built in $((SECONDS - start))s"
echo "${BIN}"
