#!/usr/bin/env bash
# Bundle the commits of main that the GPU host lacks into .gpu/main.bundle (ignored: name it in the
# device call's carry, beside .whl). scripts/gpu_run.sh fetches it there and checks the commits out
# when the sent tree is main, so benchmark results carry this repository's commit hashes.
#
#   bash scripts/gpu_send.sh BASE      # BASE: a commit the device already has (the session's start)
set -euo pipefail
base=${1:?usage: scripts/gpu_send.sh BASE-COMMIT-THE-DEVICE-HAS}
mkdir -p .gpu
git bundle create -q .gpu/main.bundle "$base..main"
ls -l .gpu/main.bundle
