#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions run by traps are reachable
# tests/real-k8s/check-up.sh: shows that build.sh and up.sh work.
#
# Builds (incrementally), then for each of SIGTERM and SIGKILL: starts up.sh in
# a fresh temporary DATA_DIR, waits for `ready`, checks `kubectl version` (the
# built 1.37 kubectl; the server must say v1.37), `kubectl get --raw /readyz`,
# a client-side `kubectl apply` of a ConfigMap (needs a correct OpenAPI v3) and
# its audit event, then sends the signal to up.sh and checks that no process
# of that control plane is left and its ports are closed. Then it restarts
# up.sh on the first DATA_DIR (PKI and etcd data reused: the ConfigMap must
# still be there), and checks the error for missing binaries.
# Ends with "N passed, N failed"; exit status 0 only if nothing failed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
passed=0
failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # description command...
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
  exit
}

t0=$SECONDS
if ! bin=$("$here/build.sh"); then
  fail "tests/real-k8s/build.sh"
  finish
fi
pass "build.sh printed $bin ($((SECONDS - t0)) s)"
kubectl_bin="$bin/kubectl"

tmp=$(mktemp -d /tmp/real-k8s-check.XXXXXX)
up_pid=""
cleanup() {
  # Only what this script started: its own up.sh, by pid.
  [[ -n "$up_pid" ]] && kill -KILL "$up_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# Live processes (zombies excluded) whose command line mentions DATA_DIR.
live_pids_of() {
  local p out=()
  for p in $(pgrep -f -- "$1"); do
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    [[ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" =~ ^[RSDTtWXP]$ ]] || continue
    out+=("$p")
  done
  echo "${out[*]}"
}

running() { pgrep -f -- "$1" >/dev/null; }

start_up() { # data_dir log; sets up_pid; returns 0 once up.sh printed `ready`
  local data=$1 log=$2 fifo="$tmp/ready.fifo" line=""
  rm -f "$fifo"
  mkfifo "$fifo"
  "$here/up.sh" "$data" >"$fifo" 2>"$log" &
  up_pid=$!
  local t=$SECONDS
  exec 5<"$fifo"
  if read -r -t 300 line <&5 && [[ $line == ready ]]; then
    # Nothing else may come on stdout: read more with a short timeout.
    local extra=""
    if read -r -t 1 extra <&5; then
      echo "up.sh printed more than 'ready' on stdout: $extra"
      exec 5<&-
      return 1
    fi
    exec 5<&-
    echo "up.sh ready in $((SECONDS - t)) s"
    return 0
  fi
  exec 5<&-
  echo "up.sh printed '$line' instead of 'ready'; its stderr:"
  tail -n 30 "$log"
  return 1
}

server_checks() { # data_dir
  local data=$1 k out err
  k=("$kubectl_bin" --kubeconfig="$data/kubeconfig")
  out=$("${k[@]}" version -o json 2>"$tmp/err") || true
  check "kubectl version: client v1.37 ($(grep -m1 -o '"gitVersion": *"[^"]*"' <<<"$out" | head -1))" \
    grep -Eq '"clientVersion": *\{[^}]*"gitVersion": *"v1\.37\.' <<<"$(tr -d '\n' <<<"$out")"
  check "kubectl version: server v1.37 ($(grep -o '"gitVersion": *"[^"]*"' <<<"$out" | tail -1))" \
    grep -Eq '"serverVersion": *\{[^}]*"gitVersion": *"v1\.37\.' <<<"$(tr -d '\n' <<<"$out")"
  check "kubectl version: no warning" test ! -s "$tmp/err"
  out=$("${k[@]}" get --raw /readyz 2>&1)
  check "kubectl get --raw /readyz = ok ($out)" test "$out" = ok
  out=$("${k[@]}" apply -f - 2>"$tmp/err" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: real-k8s-check
  namespace: default
data:
  hello: world
EOF
  )
  err=$(cat "$tmp/err")
  check "client-side kubectl apply of a ConfigMap: '$out' ${err:+(stderr: $err)}" \
    test "$out" = "configmap/real-k8s-check created" -a -z "$err"
  out=$("${k[@]}" -n default get configmap real-k8s-check -o 'jsonpath={.data.hello}' 2>&1)
  check "the ConfigMap reads back ($out)" test "$out" = world
  check "audit.log has the ConfigMap's create at level Metadata" \
    grep -q '"level":"Metadata".*"verb":"create".*"resource":"configmaps".*"name":"real-k8s-check"' "$data/audit.log"
}

stop_checks() { # data_dir signal expected_status
  local data=$1 sig=$2 want=$3 before after code=0 name ports t
  local -a still open
  before=$(live_pids_of "$data")
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    check "$name running before SIG$sig" running "$bin/$name .*$data"
  done
  # shellcheck disable=SC1091
  ports=$(source "$data/ports" && echo "$ETCD_PORT $ETCD_PEER_PORT $APISERVER_PORT $CONTROLLER_MANAGER_PORT $SCHEDULER_PORT")
  t=$SECONDS
  kill "-$sig" "$up_pid"
  { wait "$up_pid"; } 2>/dev/null || code=$?
  up_pid=""
  check "up.sh exited with status $code after SIG$sig (want $want)" test "$code" -eq "$want"
  # The kernel tears the namespace down asynchronously (a dying process may
  # already have lost its command line, so pgrep alone is not enough): wait
  # up to 15 s for all three views to agree that nothing is left.
  local deadline=$((SECONDS + 15)) p
  while true; do
    after=$(live_pids_of "$data")
    still=()
    for p in $before; do
      [[ -d /proc/$p && "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]] && still+=("$p")
    done
    open=()
    for p in $ports; do [[ -n "$(ss -Htln "sport = :$p")" ]] && open+=("$p"); done
    [[ -z "$after" && ${#still[@]} -eq 0 && ${#open[@]} -eq 0 ]] && break
    ((SECONDS < deadline)) || break
    sleep 0.2
  done
  check "no process mentioning DATA_DIR left after SIG$sig ($((SECONDS - t)) s after the signal: [$after])" \
    test -z "$after"
  check "none of the $(wc -w <<<"$before") pids seen before SIG$sig [$before] is alive (left: [${still[*]}])" \
    test ${#still[@]} -eq 0
  check "ports $ports no longer listening after SIG$sig (open: [${open[*]}])" test ${#open[@]} -eq 0
  # Leave no mess when the check failed: these processes were started by our up.sh.
  for p in $after "${still[@]}"; do kill -KILL "$p" 2>/dev/null; done
  return 0
}

for sig in TERM KILL; do
  echo "--- up.sh, stopped with SIG$sig"
  data="$tmp/$sig/data dir" # a space, on purpose
  if start_up "$data" "$tmp/up-$sig.log"; then
    pass "up.sh printed ready ($sig run)"
    server_checks "$data"
  else
    fail "up.sh printed ready ($sig run)"
  fi
  want=0
  [[ $sig == KILL ]] && want=137
  [[ -n "$up_pid" ]] && stop_checks "$data" "$sig" "$want"
  cp "$tmp/up-$sig.log" "$tmp/$sig/" 2>/dev/null
done

echo "--- up.sh again on the SIGTERM run's DATA_DIR (PKI and etcd data reused)"
data="$tmp/TERM/data dir"
ca_before=$(sha256sum <"$data/pki/ca.crt")
if start_up "$data" "$tmp/up-again.log"; then
  pass "up.sh printed ready on the reused DATA_DIR"
  check "the CA was kept" test "$(sha256sum <"$data/pki/ca.crt")" = "$ca_before"
  out=$("$kubectl_bin" --kubeconfig="$data/kubeconfig" -n default get configmap real-k8s-check -o 'jsonpath={.data.hello}' 2>&1)
  check "the ConfigMap survived the restart ($out)" test "$out" = world
  stop_checks "$data" TERM 0
else
  fail "up.sh printed ready on the reused DATA_DIR"
fi

echo "--- up.sh without binaries"
out=$(REAL_K8S_BIN_DIR="$tmp/no-such-dir" "$here/up.sh" "$tmp/nobin" 2>&1 >/dev/null)
code=$?
check "up.sh fails naming tests/real-k8s/build.sh when binaries are missing ($out)" \
  test "$code" -ne 0 -a -n "$(grep -F 'tests/real-k8s/build.sh' <<<"$out")"

finish
