#!/bin/sh
# Uninstall Colo in the order that leaves a clean node (docs/uninstall.md):
#   1. the admission webhook configuration (pods are no longer sent to a server about to go);
#   2. the workloads (colo-agent DaemonSet, colo-controller Deployment), and wait until their pods are gone:
#      at SIGTERM the agent restores every cgroup value it changed, floors its batch capacity and removes the
#      evicting mark and taint it set - with its ServiceAccount and RBAC still in place;
#   3. everything else of the kustomization (RBAC, ConfigMaps, Services, the namespace);
#   4. with --purge: Colo's annotations, taint and kubernetes.io/batch-* resources on every node, for good
#      (the same as `colo-controller --purge-node-state`).
#
# usage: deploy/uninstall.sh [-k KUSTOMIZATION_DIR] [--namespace NS] [--timeout SECONDS] [--purge]
#        [--metrics "name ..."]
#   -k          the kustomization you installed with (default: deploy/daemonset next to this script)
#   --timeout   how long to wait for the pods' shutdown (default 120; the agent's grace period is 30 s)
#   --metrics   crane's load annotations to purge (default: crane's six; give your policy's syncPolicy names)
# KUBECTL names the kubectl to run (default: kubectl).
set -eu

KUBECTL=${KUBECTL:-kubectl}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR="$HERE/daemonset"
NS=colo-system
TIMEOUT=120
PURGE=0
METRICS="cpu_usage_avg_5m cpu_usage_max_avg_1h cpu_usage_max_avg_1d mem_usage_avg_5m mem_usage_max_avg_1h mem_usage_max_avg_1d"
SELECTOR=app.kubernetes.io/part-of=colo

die() { echo "uninstall.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    -k) [ $# -ge 2 ] || die "-k needs a directory"; DIR=$2; shift 2 ;;
    --namespace) [ $# -ge 2 ] || die "--namespace needs a name"; NS=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs seconds"; TIMEOUT=$2; shift 2 ;;
    --metrics) [ $# -ge 2 ] || die "--metrics needs names"; METRICS=$2; shift 2 ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
case "$TIMEOUT" in ''|*[!0-9]*) die "--timeout must be whole seconds, got '$TIMEOUT'" ;; esac
[ -f "$DIR/kustomization.yaml" ] || die "$DIR has no kustomization.yaml (give the one you installed with: -k DIR)"

echo "1/4 admission webhook configuration"
"$KUBECTL" delete mutatingwebhookconfiguration colo-colocation-profiles --ignore-not-found

echo "2/4 workloads, then waiting up to ${TIMEOUT}s for their pods to finish their shutdown"
"$KUBECTL" -n "$NS" delete daemonset/colo-agent deployment/colo-controller --ignore-not-found --wait=false
waited=0
while :; do
  left=$("$KUBECTL" -n "$NS" get pods -l "$SELECTOR" -o name 2>/dev/null || true)
  [ -z "$left" ] && break
  if [ "$waited" -ge "$TIMEOUT" ]; then
    echo "uninstall.sh: pods still shutting down after ${TIMEOUT}s, RBAC left in place so they can finish:" >&2
    echo "$left" >&2
    echo "run this script again once they are gone (or raise --timeout)" >&2
    exit 1
  fi
  sleep 2
  waited=$((waited + 2))
done

echo "3/4 the rest of $DIR (RBAC, configuration, Services, namespace)"
"$KUBECTL" delete -k "$DIR" --ignore-not-found

if [ "$PURGE" -eq 0 ]; then
  echo "4/4 skipped: node annotations, taint and batch resources stay (run again with --purge to remove them)"
  exit 0
fi
echo "4/4 Colo's state on every node"
removals=""
for key in volcano.sh/oversubscription-cpu volcano.sh/oversubscription-memory volcano.sh/offline-job-evicting \
           $METRICS node_hot_value colo.io/load-score colo.io/oversubscription; do
  removals="$removals $key-"
done
# shellcheck disable=SC2086 # one argument per annotation
"$KUBECTL" annotate nodes --all $removals
for node in $("$KUBECTL" get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"="}{.spec.taints[*].key}{"\n"}{end}' \
                | grep 'volcano.sh/offline-job-evicting' | cut -d= -f1); do
  "$KUBECTL" taint node "$node" volcano.sh/offline-job-evicting:NoSchedule- || true  # maybe another effect only
done
null='{"kubernetes.io/batch-cpu":null,"kubernetes.io/batch-memory":null}'
for node in $("$KUBECTL" get nodes -o name); do
  "$KUBECTL" patch "$node" --subresource=status --type=merge -p "{\"status\":{\"capacity\":$null,\"allocatable\":$null}}"
done
echo "done: remove /var/lib/colo on each node when you no longer need the agent's state (docs/uninstall.md)"
