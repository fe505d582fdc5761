#!/bin/sh
# signet check: NCCL all-reduce bus bandwidth across all participants (mpijob
# backend, stage "collectives"), with nccl-tests' all_reduce_perf from 1 GiB to
# 8 GiB, one rank per GPU. This script runs on the MPI launcher; mpirun
# reads the workers from the MPIJob's hostfile. Fail below MIN_BUSBW_GBPS
# (8x H100 SXM over 8x400G NDR); Inconclusive when mpirun or all_reduce_perf
# is absent.

set -u
LC_ALL=C
export LC_ALL

# ---- signet result helpers: identical in every script of these bundles ----
# DESIGN §4: write ONE JSON result (<= 4096 bytes) to $SIGNET_RESULT_FILE
# and exit 0, 1 or 2 to match its verdict. No jq or python needed.
if [ -z "${SIGNET_RESULT_FILE:-}" ]; then
	echo "SIGNET_RESULT_FILE is not set: run this script through signet" >&2
	exit 3
fi

# json_str TEXT: TEXT as the inside of a JSON string: printable ASCII,
# tab and newline only, at most 600 characters, \ and " escaped.
json_str() {
	case $1 in
	*[!A-Za-z0-9\ ._:/,=+@%\(\)-]*) ;; # needs escaping or filtering
	*)
		if [ "${#1}" -le 600 ]; then
			printf '%s' "$1" # fast path: nothing to escape, no process
			return
		fi
		;;
	esac
	printf '%s' "$1" | tr '\t' ' ' | tr -cd '\012\040-\176' |
		awk 'BEGIN { ORS = "" } { t = t (NR > 1 ? "\n" : "") $0 } END { print substr(t, 1, 600) }' |
		sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' |
		awk 'BEGIN { ORS = "" } NR > 1 { print "\\n" } { print }'
}

# json_val VALUE: VALUE as a JSON number when it is one, else as a string.
json_val() {
	case $1 in
	0 | [1-9] | [1-9][0-9] | [1-9][0-9][0-9] | [1-9][0-9][0-9][0-9]*)
		case $1 in *[!0-9]*) ;; *)
			printf '%s' "$1" # fast path: a whole number
			return
			;;
		esac
		;;
	esac
	if printf '%s' "$1" | awk 'NR > 1 || !/^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/ { bad = 1 } END { exit (bad || NR == 0) }'; then
		printf '%s' "$1"
	else
		printf '"%s"' "$(json_str "$1")"
	fi
}

# measure NAME VALUE: appends "NAME":VALUE to $MEASUREMENTS.
MEASUREMENTS=
measure() {
	MEASUREMENTS="${MEASUREMENTS:+$MEASUREMENTS,}\"$(json_str "$1")\":$(json_val "$2")"
}

# result VERDICT SUMMARY: writes the result and exits 0/1/2 to match.
result() {
	verdict=$1
	summary=$2
	case $verdict in
	Pass) code=0 ;;
	Fail) code=1 ;;
	Inconclusive) code=2 ;;
	*) summary="script error: unknown verdict '$verdict': $summary" verdict=Inconclusive code=2 ;;
	esac
	doc=$(printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"%s","summary":"%s","measurements":{%s}}' \
		"$(json_str "${SIGNET_RUN_ID:-}")" "$(json_str "${SIGNET_CHECK_NAME:-}")" \
		"$(json_str "${SIGNET_NONCE:-}")" "$verdict" "$(json_str "$summary")" "$MEASUREMENTS")
	if [ "${#doc}" -gt 4000 ]; then
		MEASUREMENTS=
		doc=$(printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"%s","summary":"%s"}' \
			"$(json_str "${SIGNET_RUN_ID:-}")" "$(json_str "${SIGNET_CHECK_NAME:-}")" \
			"$(json_str "${SIGNET_NONCE:-}")" "$verdict" "$(json_str "$summary (measurements dropped: too large)")")
	fi
	printf '%s\n' "$doc" >"$SIGNET_RESULT_FILE" || exit 3
	exit "$code"
}

# need TOOL...: Inconclusive (never a fake Pass) when a tool is missing.
need() {
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || result Inconclusive "$t not found on this machine: cannot run ${SIGNET_CHECK_NAME:-this check}"
	done
}
# ---- end of signet result helpers ----

MIN_BUSBW_GBPS=360

need mpirun all_reduce_perf
nodes=${SIGNET_PARTICIPANTS:-1}
gpus=${SIGNET_GPU_COUNT:-8}
ranks=$((nodes * gpus))
out=$(mpirun --allow-run-as-root -np "$ranks" -npernode "$gpus" \
	-x NCCL_DEBUG=WARN -x SIGNET_RUN_ID -x SIGNET_CHECK_NAME \
	all_reduce_perf -b 1G -e 8G -f 2 -g 1 2>&1)
rc=$?
busbw=$(printf '%s\n' "$out" | awk -F': *' '/Avg bus bandwidth/ { print int($2) }' | tail -n 1)
errors=$(printf '%s\n' "$out" | awk '/Out of bounds values/ { print $NF }' | tail -n 1)
measure ranks "$ranks"
measure avgBusBandwidthGBps "${busbw:-0}"
[ -n "$busbw" ] || result Inconclusive "all_reduce_perf did not report a bus bandwidth (exit $rc): $(printf '%s\n' "$out" | tail -n 5)"
if [ "${errors:-0}" != "0" ] && [ "${errors:-0}" != "OK" ]; then
	result Fail "all_reduce_perf found $errors out-of-bounds values: wrong results across $nodes nodes"
fi
[ "$rc" -eq 0 ] || result Fail "all_reduce_perf exit $rc across $nodes nodes: $(printf '%s\n' "$out" | tail -n 5)"
[ "$busbw" -ge "$MIN_BUSBW_GBPS" ] || result Fail "average bus bandwidth $busbw GB/s over $ranks ranks is below $MIN_BUSBW_GBPS GB/s"
result Pass "average bus bandwidth $busbw GB/s over $ranks ranks on $nodes nodes"
