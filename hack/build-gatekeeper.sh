#!/usr/bin/env bash
# build-gatekeeper.sh builds the Gatekeeper oracle for morph's differential test
# (test/gatekeeper) from the sources pinned in hack/gatekeeper/go.mod, caches it and
# prints the path of the binary (the only line on stdout; progress goes to stderr).
#
#   hack/build-gatekeeper.sh            # build or reuse, print the binary's path
#   MORPH_E2E_CACHE=/some/dir hack/build-gatekeeper.sh
#
# Environment:
#   MORPH_E2E_CACHE      cache root (default $HOME/.cache/morph-e2e)
#   GATEKEEPER_BUILD_P   go build -p value (default 2)
#   GATEKEEPER_REBUILD=1 ignore the cached binary and rebuild
#
# The cache directory is keyed by the hash of hack/gatekeeper's go.mod, go.sum and
# main.go: ${MORPH_E2E_CACHE}/gatekeeper-v3.23.1-<hash>/ holds gatekeeper-oracle and
# crds/ (Gatekeeper's mutator CRDs, copied from the module). A change to the oracle or
# to its pins builds a new directory (and removes the older ones). The binary is built
# with CGO_ENABLED=0 -trimpath into a temporary directory and moved into place only
# after it answers a probe case.
# Concurrent invocations serialise on a lock file. Any failure exits non-zero with a
# message on stderr.
set -euo pipefail

log() { printf 'build-gatekeeper: %s\n' "$*" >&2; }
die() { printf 'build-gatekeeper: ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODDIR="${ROOT}/hack/gatekeeper"
CACHE_ROOT="${MORPH_E2E_CACHE:-${HOME}/.cache/morph-e2e}"
GK_MODULE="github.com/open-policy-agent/gatekeeper/v3"

command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ -f "${MODDIR}/go.mod" && -f "${MODDIR}/go.sum" ]] || die "${MODDIR}/go.mod or go.sum not found"
pinned="$(awk -v m="${GK_MODULE}" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "${MODDIR}/go.mod")"
[[ -n "${pinned}" ]] || die "hack/gatekeeper/go.mod does not require ${GK_MODULE}"
hash="$(cat "${MODDIR}/go.mod" "${MODDIR}/go.sum" "${MODDIR}/main.go" | sha256sum | cut -c1-16)"
OUT="${CACHE_ROOT}/gatekeeper-${pinned}-${hash}"
BIN="${OUT}/gatekeeper-oracle"

# check_dir DIR: succeeds when DIR holds a working oracle and its CRDs.
check_dir() {
	local dir="$1" out
	[[ -x "${dir}/gatekeeper-oracle" && -d "${dir}/crds" ]] || return 1
	out="$(printf '%s\n' '{"id":"probe","mutators":"","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}}' |
		"${dir}/gatekeeper-oracle" -crds "${dir}/crds" 2>&1)" || { log "probe failed: ${out}"; return 1; }
	grep -q '"id":"probe"' <<<"${out}" || { log "probe answered: ${out}"; return 1; }
	return 0
}

if [[ "${GATEKEEPER_REBUILD:-0}" != 1 ]] && check_dir "${OUT}"; then
	log "reusing ${BIN}"
	echo "${BIN}"
	exit 0
fi

mkdir -p "${CACHE_ROOT}" || die "cannot create cache root ${CACHE_ROOT}"
if command -v flock >/dev/null 2>&1; then
	exec 9>"${CACHE_ROOT}/.build-gatekeeper.lock"
	log "waiting for build lock ${CACHE_ROOT}/.build-gatekeeper.lock"
	flock 9 || die "cannot take build lock"
	if [[ "${GATEKEEPER_REBUILD:-0}" != 1 ]] && check_dir "${OUT}"; then
		log "reusing ${BIN}"
		echo "${BIN}"
		exit 0
	fi
fi

TMP="$(mktemp -d "${CACHE_ROOT}/.build-gatekeeper.XXXXXX")"
trap 'rm -rf "${TMP}"' EXIT

start=${SECONDS}
log "building the Gatekeeper ${pinned} oracle into ${OUT} (a cold build takes a few minutes)"
(cd "${MODDIR}" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
	go build -trimpath -p "${GATEKEEPER_BUILD_P:-2}" -ldflags "-s -w" -o "${TMP}/gatekeeper-oracle" .) ||
	die "go build of the oracle failed (module ${MODDIR})"
gkdir="$(cd "${MODDIR}" && GOWORK=off GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' "${GK_MODULE}")" ||
	die "cannot locate ${GK_MODULE} in the module cache"
mkdir -p "${TMP}/crds"
for k in assign assignmetadata modifyset assignimage; do
	cp "${gkdir}/manifest_staging/charts/gatekeeper/crds/${k}-customresourcedefinition.yaml" "${TMP}/crds/" ||
		die "cannot copy the ${k} CRD from ${gkdir}"
done
chmod -R u+w "${TMP}/crds"
check_dir "${TMP}" || die "the freshly built oracle in ${TMP} fails the probe"

rm -rf "${OUT}"
mv "${TMP}" "${OUT}" || die "cannot move the oracle into ${OUT}"
trap - EXIT
check_dir "${OUT}" || die "the oracle in ${OUT} fails the probe after install"
# Older builds (other pins or another main.go) are never used again.
for old in "${CACHE_ROOT}"/gatekeeper-*; do
	[[ -d "${old}" && "${old}" != "${OUT}" ]] && rm -rf "${old}"
done
log "built in $((SECONDS - start))s"
echo "${BIN}"
