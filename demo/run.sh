#!/usr/bin/env bash
# `make demo`: three standalone colo-agents on this machine, on 127.0.0.2, .3 and .4 (the same /proc and
# cgroups, three node names), and colo-controller in standalone mode polling them: the whole system without
# a cluster. Nothing is written: no state files, no annotations. Ctrl-C stops everything.
# Extra arguments go to colo-controller (e.g. `make demo ARGS="--output json --once"`).
set -euo pipefail
BIN=${BIN:-.venv/bin}
PORT=${DEMO_PORT:-9817}
LOGS=$(mktemp -d -t colo-demo.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$LOGS"
}
trap cleanup EXIT INT TERM

agents=()
for n in 2 3 4; do
    name="demo-node-$((n - 1))"
    "$BIN/colo-agent" --standalone --listen "127.0.0.$n:$PORT" --node-name "$name" --state-file '' \
        >"$LOGS/$name.log" 2>&1 &
    pids+=($!)
    agents+=(--agent "$name=http://127.0.0.$n:$PORT")
done
for n in 2 3 4; do
    for _ in $(seq 100); do
        # ready, and a CPU rate known (it takes two passes), so the controller's first cycle shows every window
        if "$BIN/python" -c "import json,sys,urllib.request; u='http://127.0.0.$n:$PORT'; urllib.request.urlopen(u + '/readyz', timeout=1); sys.exit(json.load(urllib.request.urlopen(u + '/api/v1/node', timeout=1))['cpu_cores'] is None)" 2>/dev/null; then
            break
        fi
        if ! kill -0 "${pids[$((n - 2))]}" 2>/dev/null; then
            echo "colo-agent on 127.0.0.$n:$PORT did not start:" >&2
            cat "$LOGS/demo-node-$((n - 1)).log" >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "agent demo-node-$((n - 1)): http://127.0.0.$n:$PORT/api/v1/node" >&2
done
COLO_CONTROLLER_POLLING__INTERVAL=${COLO_CONTROLLER_POLLING__INTERVAL:-5s} \
    "$BIN/colo-controller" --listen "${DEMO_LISTEN:-127.0.0.1:8090}" "${agents[@]}" "$@"
