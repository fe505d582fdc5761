#!/bin/sh
# signet check: GPU inventory and health flags of one node (pod backend).
# Fail when fewer GPUs than SIGNET_GPU_COUNT are visible, ECC is off, a
# GPU has uncorrectable ECC errors or a pending row remap. Inconclusive
# when nvidia-smi is absent from the image.

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

need nvidia-smi
want=${SIGNET_GPU_COUNT:-1}
if ! rows=$(nvidia-smi --query-gpu=index,name,ecc.mode.current,ecc.errors.uncorrected.volatile.total,remapped_rows.pending --format=csv,noheader,nounits 2>&1); then
	result Fail "nvidia-smi failed: $rows"
fi
count=$(printf '%s\n' "$rows" | grep -c .)
name=$(printf '%s\n' "$rows" | awk -F', ' 'NR == 1 { print $2 }')
bad=$(printf '%s\n' "$rows" | awk -F', ' '
	$3 != "Enabled" { printf "GPU %s: ECC %s; ", $1, $3 }
	$4 ~ /^[0-9]+$/ && $4 > 0 { printf "GPU %s: %s uncorrectable ECC errors; ", $1, $4 }
	$5 == "Yes" { printf "GPU %s: row remap pending; ", $1 }')
measure gpus "$count"
measure model "$name"
measure driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
if [ "$count" -lt "$want" ]; then
	result Fail "$count GPUs visible, want $want"
fi
if [ -n "$bad" ]; then
	result Fail "$bad"
fi
result Pass "$count x $name, ECC on, no uncorrectable errors, no pending row remaps"
