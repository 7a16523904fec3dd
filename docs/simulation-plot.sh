#!/bin/sh
# Regenerates docs/simulation-bitbrains.png (and prints the table) from the shared Bitbrains trace:
#   docs/simulation-plot.sh [more colo-sim flags]
# The trace (GWA-T-12 Bitbrains "Rnd", Shen et al., CCGrid 2015) is third-party data read by path, never copied.
set -eu
cd "$(dirname "$0")/.."
exec "${BIN:-.venv/bin}/colo-sim" --trace "${TRACE:-/work/shared/traces/bitbrains_rnd_dev.csv.gz}" \
    --plot docs/simulation-bitbrains.png "$@"
