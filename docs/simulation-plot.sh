#!/bin/sh
# Regenerates docs/simulation-bitbrains.png (the defaults) and docs/simulation-bitbrains-before.png (the rule
# before issue 20, docs/simulation-before.yaml) from the shared Bitbrains trace, printing both tables:
#   docs/simulation-plot.sh [more colo-sim flags]
# The trace (GWA-T-12 Bitbrains "Rnd", Shen et al., CCGrid 2015) is third-party data read by path, never copied.
set -eu
cd "$(dirname "$0")/.."
SIM="${BIN:-.venv/bin}/colo-sim"
TRACE="${TRACE:-/work/shared/traces/bitbrains_rnd_dev.csv.gz}"
"$SIM" --trace "$TRACE" --plot docs/simulation-bitbrains.png "$@"
"$SIM" --trace "$TRACE" --agent-config docs/simulation-before.yaml --plot docs/simulation-bitbrains-before.png "$@"
