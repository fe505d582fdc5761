# Shared by hack/*-tools.sh: a per-user cache of the tool binaries they
# build, so that a fresh clone (every CI run) copies a tool it built before
# instead of compiling it again (kube-apiserver takes about 10 minutes from
# cold Go caches). An entry is keyed by everything its build depends on
# (the caller passes a key: tool version or a digest of its tools module,
# plus the Go version and platform added here), so a changed pin or Go
# toolchain never reuses a stale binary. SIGNET_TOOLS_CACHE names the
# directory (default ~/.cache/signet-tools); SIGNET_TOOLS_CACHE=off turns
# the cache off.

toolcache_dir() {
  local d="${SIGNET_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/signet-tools}"
  [ "$d" = off ] && return 1
  printf '%s\n' "$d"
}

# toolcache_key KEY: KEY with the Go version and platform appended, safe as
# a file name.
toolcache_key() {
  printf '%s-%s-%s-%s\n' "$1" "$(go env GOVERSION)" "$(go env GOOS)" "$(go env GOARCH)" | tr -c 'A-Za-z0-9._\n-' '_'
}

# toolcache_get NAME KEY DEST: copies the cached NAME for KEY to DEST and
# succeeds, or fails when there is none.
toolcache_get() {
  local dir
  dir=$(toolcache_dir) || return 1
  local src="$dir/$(toolcache_key "$2")/$1"
  [ -x "$src" ] || return 1
  cp "$src" "$3.tmp" && mv "$3.tmp" "$3"
  echo "tools cache: $1 from $src" >&2
}

# toolcache_put NAME KEY SRC: stores SRC as NAME for KEY (atomically: a
# reader never sees half a binary). Failing to store is not an error.
toolcache_put() {
  local dir
  dir=$(toolcache_dir) || return 0
  local d="$dir/$(toolcache_key "$2")"
  mkdir -p "$d" 2>/dev/null || return 0
  cp "$3" "$d/.$1.tmp.$$" 2>/dev/null && mv "$d/.$1.tmp.$$" "$d/$1" || rm -f "$d/.$1.tmp.$$"
}
