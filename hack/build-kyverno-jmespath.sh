#!/usr/bin/env bash
# build-kyverno-jmespath.sh builds the Kyverno JMESPath oracle of morph's differential
# test (internal/dialect/cel TestKyvernoJMESPathDifferential) from the sources pinned in
# hack/kyverno-jmespath/go.mod, caches it and prints the binary's path (the only line
# on stdout; progress goes to stderr).
#
# Environment:
#   MORPH_E2E_CACHE  cache root (default $HOME/.cache/morph-e2e)
#
# The binary lives in ${MORPH_E2E_CACHE}/kyverno-jmespath-<hash>/, keyed by the hash of
# the module's go.mod, go.sum and main.go; older builds are removed. It is moved into
# place only after it answers a probe query.
set -euo pipefail

log() { printf 'build-kyverno-jmespath: %s\n' "$*" >&2; }
die() { printf 'build-kyverno-jmespath: ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODDIR="${ROOT}/hack/kyverno-jmespath"
CACHE_ROOT="${MORPH_E2E_CACHE:-${HOME}/.cache/morph-e2e}"
hash="$(cat "${MODDIR}/go.mod" "${MODDIR}/go.sum" "${MODDIR}/main.go" | sha256sum | cut -c1-16)"
OUT="${CACHE_ROOT}/kyverno-jmespath-${hash}"
BIN="${OUT}/kyverno-jmespath-oracle"

probe() {
	local out
	out="$(printf '%s\n' '{"query":"to_upper(a)","data":{"a":"x"}}' | "$1" 2>&1)" || return 1
	grep -q '"result":"X"' <<<"${out}" || { log "probe answered: ${out}"; return 1; }
}

if [[ -x "${BIN}" ]] && probe "${BIN}"; then
	log "reusing ${BIN}"
	echo "${BIN}"
	exit 0
fi
mkdir -p "${CACHE_ROOT}"
TMP="$(mktemp -d "${CACHE_ROOT}/.build-kyverno-jmespath.XXXXXX")"
trap 'rm -rf "${TMP}"' EXIT
log "building the Kyverno JMESPath oracle into ${OUT}"
(cd "${MODDIR}" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
	go build -trimpath -ldflags "-s -w" -o "${TMP}/kyverno-jmespath-oracle" .) ||
	die "go build of the oracle failed (module ${MODDIR})"
probe "${TMP}/kyverno-jmespath-oracle" || die "the freshly built oracle fails the probe"
rm -rf "${OUT}"
mv "${TMP}" "${OUT}"
trap - EXIT
for old in "${CACHE_ROOT}"/kyverno-jmespath-*; do
	[[ -d "${old}" && "${old}" != "${OUT}" ]] && rm -rf "${old}"
done
echo "${BIN}"
