#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions run by traps are reachable
# tests/real-k8s/up.sh DATA_DIR
#
# Starts a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, built by tests/real-k8s/build.sh) on
# 127.0.0.1 only, with the PKI, kubeconfigs, audit log and component logs under
# DATA_DIR. Prints exactly `ready` on stdout once /readyz is ok, OpenAPI v3 is
# served correctly and the controller manager and scheduler are working;
# everything else goes to stderr (component logs to DATA_DIR/logs/*.log).
# Runs in the foreground until SIGTERM or SIGINT, then stops the components
# and exits 0. Killed with SIGKILL it leaves nothing either: the components
# run in a PID namespace whose init dies with this script (see start_namespace).
#
# DATA_DIR afterwards:
#   kubeconfig            admin (O=system:masters) kubeconfig, certificates embedded
#   ports                 the ports chosen for this run (shell variable syntax)
#   audit.log             Metadata-level audit log of kube-apiserver
#   audit-policy.yaml
#   pki/                  CAs, serving and client certificates, service-account keys
#   config/               the controller manager's and scheduler's kubeconfigs
#   etcd/                 etcd's data
#   logs/<component>.log
# A re-run with an existing DATA_DIR reuses its PKI and its etcd data (objects
# survive a restart); ports are chosen anew and the kubeconfigs rewritten. Use
# a new or empty DATA_DIR for a clean cluster. Only one up.sh per DATA_DIR.
#
# Network: every component listens on 127.0.0.1 only. The service and pod
# ranges lie in 198.18.0.0/15 (RFC 2544 benchmarking space, never routed):
# services 198.18.128.0/20, node pod CIDRs /24s from 198.18.0.0/17. Nothing
# here sends traffic to those ranges (no kubelet, no kube-proxy, no pods run).
# A later test that makes something connect to them (pods, Service IPs,
# aggregated APIs by Service) must first add `ip route add unreachable
# 198.18.0.0/15` on the host, or route the range into a network namespace it
# created; this script does not touch routes.
# The apiserver listens and advertises 127.0.0.1, which the `kubernetes`
# Service's endpoint reconciler refuses (Endpoints may not be loopback), so it
# runs with --endpoint-reconciler-type=none: the Service exists (ClusterIP
# 198.18.128.1) without endpoints. Clients use the kubeconfig's 127.0.0.1 URL.
#
# Environment:
#   REAL_K8S_BIN_DIR        where the binaries are (default: <repo>/target/real-k8s/bin)
#   REAL_K8S_READY_TIMEOUT  seconds to wait for readiness (default 180)
set -euo pipefail

# A non-interactive shell that starts a command with `&` makes it ignore
# SIGINT, and bash cannot trap a signal ignored on entry: start afresh with
# SIGINT and SIGTERM at their defaults so that both stop the control plane.
if [[ -z "${REAL_K8S_UP_SIGNALS:-}" && "${1:-}" != --namespace-init ]] && env --default-signal=INT true 2>/dev/null; then
  REAL_K8S_UP_SIGNALS=default exec env --default-signal=INT,TERM bash "${BASH_SOURCE[0]}" "$@"
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="${REAL_K8S_BIN_DIR:-$root/target/real-k8s/bin}"

SERVICE_CIDR=198.18.128.0/20
SERVICE_KUBERNETES_IP=198.18.128.1 # first address of SERVICE_CIDR: the `kubernetes` Service
CLUSTER_CIDR=198.18.0.0/17
NODE_CIDR_MASK=24
SA_ISSUER=https://kubernetes.default.svc.cluster.local
# Exit code of the namespace init when a component could not bind its port
# (another process took it between our check and its start): retry with new ports.
EXIT_PORT_TAKEN=75

log() { echo "up.sh: $*" >&2; }
die() { echo "up.sh: error: $*" >&2; exit 1; }

# Never send the components' or kubectl's traffic to a proxy: loopback only.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY

# --------------------------------------------------------------------------
# Inside the PID namespace: this script runs again as its init (PID 1).
# --------------------------------------------------------------------------
namespace_init() {
  local data=$1
  # shellcheck disable=SC1091
  source "$data/ports"
  local logs="$data/logs" pki="$data/pki" cfg="$data/config"
  declare -A pid_of=()
  local order=(kube-scheduler kube-controller-manager kube-apiserver etcd)

  stop() {
    local code=$1 name deadline
    trap '' TERM INT
    for name in "${order[@]}"; do
      [[ -n "${pid_of[$name]:-}" ]] || continue
      kill -TERM "${pid_of[$name]}" 2>/dev/null || true
      # etcd last, once its clients are gone; give each a bounded time.
      if [[ $name == kube-apiserver || $name == etcd ]]; then
        deadline=$((SECONDS + 30))
        while kill -0 "${pid_of[$name]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      fi
    done
    deadline=$((SECONDS + 10))
    for name in "${order[@]}"; do
      [[ -n "${pid_of[$name]:-}" ]] || continue
      while kill -0 "${pid_of[$name]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    done
    # Anything still alive in the namespace (PID 1 is not hit by kill -1).
    kill -KILL -1 2>/dev/null || true
    exit "$code"
  }
  trap 'stop 0' TERM INT

  start() {
    local name=$1
    shift
    echo "=== $(date -u +%FT%TZ) $*" >>"$logs/$name.log"
    "$@" >>"$logs/$name.log" 2>&1 </dev/null &
    pid_of[$name]=$!
  }

  # A component that exits on its own stops the whole control plane.
  check_alive() {
    local name code
    for name in "${!pid_of[@]}"; do
      if ! kill -0 "${pid_of[$name]}" 2>/dev/null; then
        code=0
        wait "${pid_of[$name]}" || code=$?
        if tail -n 50 "$logs/$name.log" | grep -q 'address already in use'; then
          echo "up.sh: $name could not bind its port (taken meanwhile)" >&2
          unset "pid_of[$name]"
          stop "$EXIT_PORT_TAKEN"
        fi
        echo "up.sh: $name exited with status $code; last lines of $logs/$name.log:" >&2
        tail -n 20 "$logs/$name.log" >&2
        unset "pid_of[$name]"
        stop 1
      fi
    done
  }

  start etcd "$bin/etcd" \
    --name=real-k8s \
    --data-dir="$data/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="real-k8s=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true
  # --unsafe-no-fsync: a test cluster; a crash of the process loses nothing
  # (the page cache survives it), only a crash of the machine would.

  local deadline=$((SECONDS + 60))
  until (exec 3<>"/dev/tcp/127.0.0.1/$ETCD_PORT") 2>/dev/null; do
    check_alive
    ((SECONDS < deadline)) || { echo "up.sh: etcd did not listen on 127.0.0.1:$ETCD_PORT within 60 s" >&2; stop 1; }
    sleep 0.2
  done

  start kube-apiserver "$bin/kube-apiserver" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allow-privileged=true \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction,PodSecurity \
    --client-ca-file="$pki/ca.crt" \
    --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --service-account-issuer="$SA_ISSUER" \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --api-audiences="$SA_ISSUER" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" \
    --proxy-client-key-file="$pki/front-proxy-client.key" \
    --audit-policy-file="$data/audit-policy.yaml" \
    --audit-log-path="$data/audit.log" \
    --audit-log-format=json \
    --audit-log-mode=blocking

  # The controller manager and the scheduler exit at once when the apiserver
  # refuses them (as before its RBAC roles are bootstrapped): start them once
  # /readyz is ok.
  deadline=$((SECONDS + 120))
  until [[ "$("$bin/kubectl" --kubeconfig="$data/kubeconfig" --request-timeout=5s get --raw /readyz 2>/dev/null)" == ok ]]; do
    check_alive
    ((SECONDS < deadline)) || { echo "up.sh: kube-apiserver's /readyz not ok within 120 s" >&2; stop 1; }
    sleep 0.5
  done

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$cfg/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$cfg/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$cfg/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$CONTROLLER_MANAGER_PORT" \
    --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" \
    --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=true \
    --cluster-cidr="$CLUSTER_CIDR" \
    --node-cidr-mask-size="$NODE_CIDR_MASK" \
    --flex-volume-plugin-dir="$data/flexvolume"
  # (--flex-volume-plugin-dir: by default it creates /usr/libexec/kubernetes/...)

  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$cfg/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$cfg/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$cfg/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT"

  while true; do
    # Returns when a component exits, or early when TERM/INT runs the trap.
    wait -n || true
    check_alive
  done
}

if [[ "${1:-}" == --namespace-init ]]; then
  [[ $# -eq 2 ]] || die "--namespace-init takes DATA_DIR"
  namespace_init "$2"
fi

# --------------------------------------------------------------------------
# Outside: checks, PKI, configuration, the namespace, readiness.
# --------------------------------------------------------------------------
[[ $# -eq 1 && -n "$1" && "$1" != -* ]] || die "usage: tests/real-k8s/up.sh DATA_DIR"
exec 3>&1 1>&2 # stdout is for the `ready` line only

missing=()
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [[ -x "$bin/$b" ]] || missing+=("$b")
done
((${#missing[@]} == 0)) ||
  die "missing in $bin: ${missing[*]}. Build them first with tests/real-k8s/build.sh"
for tool in openssl unshare setpriv flock ss base64; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (util-linux, iproute2, openssl, coreutils)"
done
[[ $(id -u) -eq 0 ]] ||
  die "must run as root: the components run in their own PID namespace (unshare --pid), so that nothing outlives this script"

data=$(realpath -m "$1")
mkdir -p "$data"/{pki,config,logs}
# One up.sh per DATA_DIR. The lock is inherited by the components and freed
# when the last of them is gone.
exec 4>"$data/.lock"
flock -n 4 || die "another up.sh is running with $data"
pki="$data/pki"
cfg="$data/config"
kubectl() { "$bin/kubectl" --kubeconfig="$data/kubeconfig" --request-timeout=5s "$@"; }

# ---- PKI (kept across runs) ----------------------------------------------
new_ec_key() { [[ -f "$1" ]] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
new_ca() { # name CN
  local name=$1 cn=$2
  [[ -f "$pki/$name.crt" ]] && return
  new_ec_key "$pki/$name.key"
  openssl req -x509 -new -key "$pki/$name.key" -subj "/CN=$cn" -days 3650 -out "$pki/$name.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}
new_cert() { # ca name subject extendedKeyUsage [subjectAltName]
  local ca=$1 name=$2 subject=$3 eku=$4 san=${5:-}
  [[ -f "$pki/$name.crt" ]] && return
  new_ec_key "$pki/$name.key"
  local ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$eku
authorityKeyIdentifier=keyid"
  [[ -n "$san" ]] && ext+=$'\n'"subjectAltName=$san"
  openssl req -new -key "$pki/$name.key" -subj "$subject" 2>/dev/null |
    openssl x509 -req -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 3650 -extfile <(printf '%s\n' "$ext") -out "$pki/$name.crt" 2>/dev/null
}
umask 077
new_ca ca real-k8s-ca
new_cert ca apiserver /CN=kube-apiserver serverAuth \
  "IP:127.0.0.1,IP:$SERVICE_KUBERNETES_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
new_cert ca apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" clientAuth
new_cert ca admin "/O=system:masters/CN=kubernetes-admin" clientAuth
new_cert ca kube-controller-manager /CN=system:kube-controller-manager clientAuth
new_cert ca kube-scheduler /CN=system:kube-scheduler clientAuth
new_ca front-proxy-ca real-k8s-front-proxy-ca
new_cert front-proxy-ca front-proxy-client /CN=front-proxy-client clientAuth
if [[ ! -f "$pki/sa.key" ]]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
umask 022

cat >"$data/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
# Each request once, when its response is complete (or when it panicked).
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
EOF

# ---- ports ----------------------------------------------------------------
# Chosen per run below the kernel's ephemeral range (so no outgoing connection
# holds them), not listening or bound now, distinct. Two control planes may
# still pick the same port at the same moment: a component then fails to bind,
# the namespace init exits with EXIT_PORT_TAKEN and we retry with new ports.
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
port_low=10000
port_high=$((ephemeral_low > port_low + 1000 ? ephemeral_low - 1 : 32767))
chosen=()
pick_port() {
  local p
  while true; do
    p=$(((RANDOM << 15 | RANDOM) % (port_high - port_low + 1) + port_low))
    [[ " ${chosen[*]} " == *" $p "* ]] && continue
    [[ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ]] || continue
    chosen+=("$p")
    echo "$p"
    return
  done
}

kubeconfig() { # file user cert-name
  local file=$1 user=$2 name=$3
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: real-k8s
    cluster:
      server: https://127.0.0.1:$APISERVER_PORT
      certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
  - name: $user
    user:
      client-certificate-data: $(base64 -w0 <"$pki/$name.crt")
      client-key-data: $(base64 -w0 <"$pki/$name.key")
contexts:
  - name: $user@real-k8s
    context:
      cluster: real-k8s
      user: $user
current-context: $user@real-k8s
EOF
  chmod 600 "$file"
}

# ---- the namespace ---------------------------------------------------------
ns_pid=""
init_pid() { # the namespace's init, as seen from here: unshare's only child
  local c
  c=$(cat "/proc/$ns_pid/task/$ns_pid/children" 2>/dev/null) || true
  echo "${c%% *}"
}
start_namespace() {
  # setpriv --pdeathsig KILL: unshare gets SIGKILL when this script dies,
  #   however it dies (the kernel sends it; nothing of ours needs to run);
  # unshare --kill-child: the namespace's init gets SIGKILL when unshare dies;
  # and when a PID namespace's init dies the kernel kills every process in it.
  # --mount-proc: /proc inside shows the namespace's processes only.
  # setsid: the components get their own session, so a Ctrl-C on a terminal
  # reaches this script only, which then stops them in order.
  setpriv --pdeathsig KILL -- \
    unshare --pid --fork --kill-child --mount-proc -- \
    setsid env REAL_K8S_BIN_DIR="$bin" bash "$here/up.sh" --namespace-init "$data" 3>&- &
  ns_pid=$!
}
stop_namespace() {
  [[ -n "$ns_pid" ]] || return 0
  local init deadline
  init=$(init_pid)
  if [[ -n "$init" ]]; then
    kill -TERM "$init" 2>/dev/null || true
    deadline=$((SECONDS + 60))
    while kill -0 "$ns_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  fi
  # Still there after a minute (or never started its init): SIGKILL unshare,
  # which takes the whole namespace with it.
  kill -KILL "$ns_pid" 2>/dev/null || true
  wait "$ns_pid" 2>/dev/null || true
  ns_pid=""
}
on_signal() {
  trap '' TERM INT
  log "stopping the control plane"
  stop_namespace
  log "stopped"
  exit 0
}
trap on_signal TERM INT
trap 'stop_namespace' EXIT

openapi_good() {
  local index doc
  index=$(kubectl get --raw /openapi/v3 2>/dev/null) || return 1
  [[ $index == *'"api/v1"'* && $index == *'"apis/coordination.k8s.io/v1"'* ]] || return 1
  # Under Go's jsonv2 experiment the documents come out as {"openapi":"3.0.0","info":{"Extensions":null,...
  doc=$(kubectl get --raw /openapi/v3/apis/coordination.k8s.io/v1 2>/dev/null) || return 1
  [[ $doc == '{"openapi":"3.0.0"'* && $doc == *'"title":"Kubernetes"'* && $doc != *'"Extensions"'* ]] || return 1
}

ready_timeout=${REAL_K8S_READY_TIMEOUT:-180}
for _ in 1 2 3 4 5; do
  chosen=()
  ETCD_PORT=$(pick_port)
  chosen+=("$ETCD_PORT")
  ETCD_PEER_PORT=$(pick_port)
  chosen+=("$ETCD_PEER_PORT")
  APISERVER_PORT=$(pick_port)
  chosen+=("$APISERVER_PORT")
  CONTROLLER_MANAGER_PORT=$(pick_port)
  chosen+=("$CONTROLLER_MANAGER_PORT")
  SCHEDULER_PORT=$(pick_port)
  cat >"$data/ports" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
CONTROLLER_MANAGER_PORT=$CONTROLLER_MANAGER_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
EXIT_PORT_TAKEN=$EXIT_PORT_TAKEN
EOF
  kubeconfig "$data/kubeconfig" kubernetes-admin admin
  kubeconfig "$cfg/kube-controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
  kubeconfig "$cfg/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler

  log "starting etcd 127.0.0.1:$ETCD_PORT (peer $ETCD_PEER_PORT), kube-apiserver https://127.0.0.1:$APISERVER_PORT," \
    "kube-controller-manager :$CONTROLLER_MANAGER_PORT, kube-scheduler :$SCHEDULER_PORT; logs in $data/logs"
  started=$SECONDS
  start_namespace
  step=apiserver
  while true; do
    if ! kill -0 "$ns_pid" 2>/dev/null; then
      code=0
      wait "$ns_pid" || code=$?
      ns_pid=""
      [[ $code -eq $EXIT_PORT_TAKEN ]] && { log "a port was taken; retrying with new ports"; continue 2; }
      die "the control plane stopped while starting (status $code); see $data/logs/*.log"
    fi
    ((SECONDS - started < ready_timeout)) ||
      die "not ready after $ready_timeout s (waiting for: $step); see $data/logs/*.log"
    prev=$step
    case $step in
      apiserver)
        [[ "$(kubectl get --raw /readyz 2>/dev/null)" == ok ]] && step=openapi ;;
      openapi)
        openapi_good && step=controller-manager ;;
      controller-manager)
        # Its service-account controller made the default ServiceAccount, and it leads.
        kubectl -n default get serviceaccount default >/dev/null 2>&1 &&
          kubectl -n kube-system get lease kube-controller-manager >/dev/null 2>&1 && step=scheduler ;;
      scheduler)
        kubectl -n kube-system get lease kube-scheduler >/dev/null 2>&1 && break 2 ;;
    esac
    [[ $step == "$prev" ]] && sleep 0.5
  done
done
[[ -n "$ns_pid" ]] || die "could not find free ports in 5 attempts"

log "ready in $((SECONDS - started)) s: kubectl --kubeconfig=$data/kubeconfig"
echo ready >&3

# Foreground until SIGTERM/SIGINT (on_signal) or until the control plane dies.
code=0
wait "$ns_pid" || code=$?
ns_pid=""
die "the control plane stopped by itself (status $code); see $data/logs/*.log"
