#!/usr/bin/env bash
# Installs dependencies, builds libresil and runs the main job: `resil lab`.
# Extra arguments go to `resil lab` (e.g. --only P1,H3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRESIL_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" --target resil >/dev/null
exec ./build/release/resil lab --json build/release/lab-evidence.json "$@"
