#!/bin/sh
# signet check: every InfiniBand / RoCE port of the node is ACTIVE at the
# expected rate (pod backend, stage "fabric"). Fail on a port that is not
# ACTIVE or slower than MIN_RATE_GBPS; Inconclusive when the node exposes
# no RDMA devices (the image mounts /sys read-only from the host).

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

MIN_RATE_GBPS=200

[ -d /sys/class/infiniband ] || result Inconclusive "no /sys/class/infiniband: no RDMA devices visible"
ports=0
down=
for p in /sys/class/infiniband/*/ports/*; do
	[ -r "$p/state" ] || continue
	ports=$((ports + 1))
	dev=${p#/sys/class/infiniband/}
	state=$(awk '{ print $2 }' "$p/state")
	rate=$(awk '{ print int($1) }' "$p/rate" 2>/dev/null)
	if [ "$state" != "ACTIVE" ] || [ "${rate:-0}" -lt "$MIN_RATE_GBPS" ]; then
		down="$down$dev: $state ${rate:-?} Gb/s; "
	fi
done
measure ports "$ports"
[ "$ports" -gt 0 ] || result Inconclusive "no RDMA ports under /sys/class/infiniband"
[ -z "$down" ] || result Fail "ports not ACTIVE at $MIN_RATE_GBPS Gb/s: $down"
result Pass "$ports RDMA ports ACTIVE at $MIN_RATE_GBPS Gb/s or more"
