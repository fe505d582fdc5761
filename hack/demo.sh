#!/usr/bin/env bash
# make demo: signet's main job on the embedded example spec repository.
set -euo pipefail
cd "$(dirname "$0")/.."
SIGNET=${SIGNET:-bin/signet}
echo "== signet validate examples/spec-repo"
"$SIGNET" validate examples/spec-repo
