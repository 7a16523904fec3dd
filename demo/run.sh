#!/usr/bin/env bash
# `make demo`: three standalone colo-agents on this machine, on 127.0.0.2, .3 and .4 (the same /proc and
# cgroups, three node names), and colo-controller in standalone mode polling them: the whole system without
# a cluster. Nothing is written: no state files, no annotations. Ctrl-C stops everything, quietly, exit code 0:
# the terminal's SIGINT reaches only this script and the controller (the agents run in a session of their own,
# since they handle SIGINT themselves and would stop first), and this script then stops the agents and removes
# their logs.
# Extra arguments go to colo-controller (e.g. `make demo ARGS="--output json --once"`). Everything but the
# controller's own output goes to stderr, so `--output json` is pure JSON on stdout.
# Exit codes: 0 (also after Ctrl-C); 1 when an agent did not start, stopped, or no agent answered; 2 when an
# address is taken.
set -euo pipefail
BIN=${BIN:-.venv/bin}
PORT=${DEMO_PORT:-9817}
LISTEN=${DEMO_LISTEN:-127.0.0.1:8090}
LOGS=$(mktemp -d -t colo-demo.XXXXXX)
# The agents handle SIGINT themselves, so Ctrl-C must not reach them (they would stop before the controller and
# look like failures). On a terminal, job control: each job is a process group of its own and the controller the
# terminal's foreground one, so Ctrl-C reaches it alone (not make, which would die of it: "Interrupt", exit 130).
# Off a terminal, the agents get a session of their own (setsid; a background job is no group leader, so setsid
# execs in place and $! stays the agent's pid) and the INT trap below turns the SIGINT into a clean end.
detach=(setsid)
if [ -t 2 ]; then
    set -m
    detach=()
fi
pids=()
status=1
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$status" -eq 0 ] || [ "${#pids[@]}" -eq 0 ]; then
        rm -rf "$LOGS"
    else
        echo "demo: the agents' logs are kept in $LOGS" >&2
    fi
}
trap cleanup EXIT
interrupted=0
# Ctrl-C while the agents start: nothing went wrong, stop here. While the controller runs, it stops on the same
# SIGINT and this handler only notes it (bash runs it once the controller has exited).
trap 'status=0; exit 0' INT

# Every address must be free before anything starts: a taken one is named, with how to pick others.
taken=$("$BIN/python" - "$PORT" "$LISTEN" <<'PY'
import socket, sys
port, listen = sys.argv[1], sys.argv[2]
wanted = [(f"127.0.0.{n}", int(port)) for n in (2, 3, 4)] + [(listen.rpartition(":")[0], int(listen.rpartition(":")[2]))]
for host, p in wanted:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no obstacle
        try:
            s.bind((host, p))
        except OSError as err:
            print(f"{host}:{p} ({err.strerror})")
PY
)
if [ -n "$taken" ]; then
    echo "demo: address taken, nothing started: $(echo $taken | sed 's/) /), /g')" >&2
    echo "demo: another process listens there (see: ss -ltnp); pick others with DEMO_PORT=19817 (agents)" \
        "or DEMO_LISTEN=127.0.0.1:18090 (controller)" >&2
    status=2
    exit 2
fi

agents=()
for n in 2 3 4; do
    name="demo-node-$((n - 1))"
    "${detach[@]}" "$BIN/colo-agent" --standalone --listen "127.0.0.$n:$PORT" --node-name "$name" --state-file '' \
        >"$LOGS/$name.log" 2>&1 </dev/null &
    pids+=($!)
    agents+=(--agent "$name=http://127.0.0.$n:$PORT")
done
for n in 2 3 4; do
    name="demo-node-$((n - 1))"
    for _ in $(seq 150); do
        # OUR agent (its node name) is ready and knows a CPU rate (two passes), so the first cycle shows every window
        # in the background and waited for: a SIGINT then ends `wait` at once and runs the trap (bash drops a SIGINT
        # that arrives while a foreground child exits normally, e.g. a probe interrupted as it finishes)
        "$BIN/python" -c "import json,sys,urllib.request; u='http://127.0.0.$n:$PORT'; urllib.request.urlopen(u + '/readyz', timeout=1); d = json.load(urllib.request.urlopen(u + '/api/v1/node', timeout=1)); sys.exit(d['node_name'] != '$name' or d['cpu_cores'] is None)" 2>/dev/null &
        if wait $!; then
            break
        fi
        if ! kill -0 "${pids[$((n - 2))]}" 2>/dev/null; then
            echo "demo: colo-agent $name on 127.0.0.$n:$PORT stopped:" >&2
            cat "$LOGS/$name.log" >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "demo: agent $name: http://127.0.0.$n:$PORT/api/v1/node" >&2
done
set +e
trap 'interrupted=1' INT
COLO_CONTROLLER_POLLING__INTERVAL=${COLO_CONTROLLER_POLLING__INTERVAL:-5s} \
    "$BIN/colo-controller" --listen "$LISTEN" "${agents[@]}" "$@"
status=$?
set -e
# an agent that died while the controller ran: say so (its log is kept); Ctrl-C does not reach the agents
stopped=0
for i in 0 1 2; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
        echo "demo: colo-agent demo-node-$((i + 1)) stopped during the demo (log: $LOGS/demo-node-$((i + 1)).log)" >&2
        stopped=1
    fi
done
if [ "$stopped" -eq 1 ]; then
    [ "$status" -eq 0 ] && status=1
elif [ "$interrupted" -eq 1 ]; then
    status=0   # Ctrl-C is how the demo ends, whatever the controller said as it stopped
fi
exit "$status"
