#!/usr/bin/env bash
# Installs the browser the report's tests drive (report/browser_test.go,
# chromedp): Debian's chromium package, when no chromium is on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
echo "browser-tools: chromium not on PATH; running: apt-get update && apt-get install -y chromium" >&2
SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
