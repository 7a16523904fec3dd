#!/bin/sh
# Uninstall Colo in the order that leaves a clean node (docs/uninstall.md):
#   1. the admission webhook configuration (pods are no longer sent to a server about to go);
#   2. the workloads (colo-agent DaemonSet, colo-controller Deployment), and wait until their pods are gone:
#      at SIGTERM the agent restores every cgroup value it changed, floors its batch capacity and removes the
#      evicting mark and taint it set - with its ServiceAccount and RBAC still in place;
#   3. kubernetes.io/batch-* on every node: set to what its running batch pods request, lowered as they
#      finish, removed with the last one (the same as `colo-controller --purge-node-state --follow`): no agent
#      limits a batch pod any more, so no capacity may outlive the pods that hold it;
#   4. everything else of the kustomization (RBAC, ConfigMaps, Services, the namespace);
#   5. with --purge: Colo's annotations and taint on every node, for good.
#
# usage: deploy/uninstall.sh [-k KUSTOMIZATION_DIR] [--namespace NS] [--timeout SECONDS]
#        [--batch-timeout SECONDS] [--purge] [--metrics "name ..."]
#   -k          the kustomization you installed with (default: deploy/daemonset next to this script)
#   --timeout   how long to wait for the pods' shutdown (default 120; the agent's grace period is 30 s)
#   --batch-timeout  how long step 3 follows the remaining batch pods (default 3600; 0: one pass); if some
#               still run then, the rest is done and the script ends with exit code 1 naming their nodes
#   --metrics   crane's load annotations to purge (default: crane's six; give your policy's syncPolicy names)
# KUBECTL names the kubectl to run (default: kubectl).
set -eu

KUBECTL=${KUBECTL:-kubectl}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR="$HERE/daemonset"
NS=colo-system
TIMEOUT=120
PURGE=0
BATCH_TIMEOUT=3600
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
    --batch-timeout) [ $# -ge 2 ] || die "--batch-timeout needs seconds"; BATCH_TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
case "$TIMEOUT" in ''|*[!0-9]*) die "--timeout must be whole seconds, got '$TIMEOUT'" ;; esac
case "$BATCH_TIMEOUT" in ''|*[!0-9]*) die "--batch-timeout must be whole seconds, got '$BATCH_TIMEOUT'" ;; esac
[ -f "$DIR/kustomization.yaml" ] || die "$DIR has no kustomization.yaml (give the one you installed with: -k DIR)"

echo "1/5 admission webhook configuration"
"$KUBECTL" delete mutatingwebhookconfiguration colo-colocation-profiles --ignore-not-found

echo "2/5 workloads, then waiting up to ${TIMEOUT}s for their pods to finish their shutdown"
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

# kubernetes.io/batch-*: kubelet re-admits running pods against allocatable when it restarts (removing them
# under a running batch pod gets it killed), and with no agent left, anything above what running batch pods
# request admits new batch pods nothing limits. So each node is set to exactly what its batch pods that have
# not finished request, every second, until the last one has finished and nothing is left.
B_CPU='kubernetes\.io/batch-cpu'
B_MEM='kubernetes\.io/batch-memory'
# quantities -> integers (rounded up); per pod by kubelet's rule (init containers run before the app
# containers, sidecars alongside them); per node. Input: the pods (node, then kind=cpu=memory per container),
# then the nodes (name, then allocatable cpu=memory=capacity cpu=memory). Output per node carrying batch
# resources: name, whether pods still hold them (0/1), the status values to write (or -), cpu, memory.
PLAN_AWK='
function q(s,   n, u) {
  if (s == "") return 0
  if (!match(s, /^[0-9]+(\.[0-9]+)?/)) { bad = s; return 0 }
  n = substr(s, 1, RLENGTH) + 0; u = substr(s, RLENGTH + 1)
  if (!(u in unit)) { bad = s; return 0 }
  n = n * unit[u]
  return (n == int(n)) ? n : int(n) + 1
}
BEGIN {
  unit[""] = 1; unit["m"] = 0.001; unit["k"] = 1e3; unit["M"] = 1e6; unit["G"] = 1e9; unit["T"] = 1e12
  unit["P"] = 1e15; unit["Ki"] = 2^10; unit["Mi"] = 2^20; unit["Gi"] = 2^30; unit["Ti"] = 2^40; unit["Pi"] = 2^50
}
FILENAME == ARGV[1] {
  if ($1 == "" || $1 == "-") next
  ac = am = sc = sm = ic = im = found = 0
  for (i = 2; i <= NF; i++) {
    split($i, f, "=")
    if (f[2] != "" || f[3] != "") found = 1
    c = q(f[2]); m = q(f[3])
    if (f[1] == "iAlways") { sc += c; sm += m; ac += c; am += m }
    else if (f[1] == "i") { if (c + sc > ic) ic = c + sc; if (m + sm > im) im = m + sm }
    else { ac += c; am += m }
  }
  if (found) { cpu[$1] += (ac > ic ? ac : ic); mem[$1] += (am > im ? am : im) }
  next
}
FILENAME == ARGV[2] && NF >= 2 {
  split($2, v, "=")
  has_c = (v[1] != "" || v[3] != ""); has_m = (v[2] != "" || v[4] != "")
  if (!has_c && !has_m) next
  want_c = (cpu[$1] > 0) ? sprintf("\"%.0f\"", cpu[$1]) : "null"
  want_m = (mem[$1] > 0) ? sprintf("\"%.0f\"", mem[$1]) : "null"
  change = ""
  if (has_c && (want_c == "null" || q(v[1]) != cpu[$1] || q(v[3]) != cpu[$1]))
    change = "\"kubernetes.io/batch-cpu\":" want_c
  if (has_m && (want_m == "null" || q(v[2]) != mem[$1] || q(v[4]) != mem[$1]))
    change = change (change == "" ? "" : ",") "\"kubernetes.io/batch-memory\":" want_m
  left = (has_c && cpu[$1] > 0) || (has_m && mem[$1] > 0)
  printf "%s %d %s %.0f %.0f\n", $1, left, (change == "" ? "-" : "{" change "}"), cpu[$1], mem[$1]
}
END { if (bad != "") print "uninstall.sh: unreadable quantity " bad " (counted as 0)" > "/dev/stderr" }
'
batch_plan() {
  "$KUBECTL" get pods --all-namespaces --field-selector=status.phase!=Succeeded,status.phase!=Failed -o jsonpath="{range .items[*]}-{.spec.nodeName} {range .spec.initContainers[*]}i{.restartPolicy}={.resources.requests.$B_CPU}={.resources.requests.$B_MEM} {end}{range .spec.containers[*]}c={.resources.requests.$B_CPU}={.resources.requests.$B_MEM} {end}{\"\\n\"}{end}" \
    > "$WORK/pods.raw" || return 1
  sed 's/^-\([^ ]\)/\1/' "$WORK/pods.raw" > "$WORK/pods"  # '-': the node of a pod not bound yet
  "$KUBECTL" get nodes -o jsonpath="{range .items[*]}{.metadata.name} {.status.allocatable.$B_CPU}={.status.allocatable.$B_MEM}={.status.capacity.$B_CPU}={.status.capacity.$B_MEM}{\"\\n\"}{end}" \
    > "$WORK/nodes" || return 1
  awk "$PLAN_AWK" "$WORK/pods" "$WORK/nodes"
}
echo "3/5 kubernetes.io/batch-* at what running batch pods request, following them for up to ${BATCH_TIMEOUT}s"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
deadline=$(( $(date +%s) + BATCH_TIMEOUT ))
while :; do
  batch_plan > "$WORK/plan" || { echo "uninstall.sh: reading pods and nodes failed; batch resources left as they are" >&2; exit 1; }
  left=""
  while read -r node held values cpu mem; do
    if [ "$values" != "-" ]; then
      "$KUBECTL" patch "node/$node" --subresource=status --type=merge \
        -p "{\"status\":{\"capacity\":$values,\"allocatable\":$values}}" >/dev/null
      if [ "$held" -eq 1 ]; then
        echo "    $node: kubernetes.io/batch-* at what its running batch pods request (${cpu}m cpu, $mem bytes)"
      else
        echo "    $node: kubernetes.io/batch-* removed"
      fi
    fi
    [ "$held" -eq 1 ] && left="$left $node"
  done < "$WORK/plan"
  [ -z "$left" ] && break
  [ "$(date +%s)" -ge "$deadline" ] && break
  sleep 1
done

echo "4/5 the rest of $DIR (RBAC, configuration, Services, namespace)"
"$KUBECTL" delete -k "$DIR" --ignore-not-found

if [ "$PURGE" -eq 0 ]; then
  echo "5/5 skipped: node annotations and taint stay (run again with --purge to remove them)"
else
  echo "5/5 Colo's annotations and taint on every node"
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
fi
if [ -n "$left" ]; then
  echo "uninstall.sh: after ${BATCH_TIMEOUT}s batch pods still run on:$left; their kubernetes.io/batch-* stay at" \
       "what those pods request: run this script again, or colo-controller --purge-node-state --follow" >&2
  exit 1
fi
echo "done: no node carries batch resources; remove /var/lib/colo on each node when you no longer need the agent's state (docs/uninstall.md)"
