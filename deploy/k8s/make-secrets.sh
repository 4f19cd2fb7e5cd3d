#!/usr/bin/env bash
# Makes the Secrets of deploy/k8s with fresh material, in namespace
# kvrouter: a gossip key, an admin token, a cluster CA with a certificate
# per replica (kvrouter-0..N-1). The CA and its key stay in DIR (default
# ./kvrouter-cluster-tls): keep them off the cluster.
set -euo pipefail
dir=${1:-kvrouter-cluster-tls}
replicas=${REPLICAS:-3}
router=${ROUTER:-router}
nodes=()
for i in $(seq 0 $((replicas - 1))); do nodes+=("kvrouter-$i"); done
"$router" tls init "$dir" "${nodes[@]}" >/dev/null
files=(--from-file="ca.pem=$dir/ca.pem")
for n in "${nodes[@]}"; do
	files+=(--from-file="$n.pem=$dir/$n.pem" --from-file="$n-key.pem=$dir/$n-key.pem")
done
kubectl -n kvrouter create secret generic kvrouter-cluster-tls "${files[@]}"
kubectl -n kvrouter create secret generic kvrouter-gossip --from-literal=gossip-key="$(head -c 32 /dev/urandom | base64)"
kubectl -n kvrouter create secret generic kvrouter-admin --from-literal=admin-token="$(head -c 32 /dev/urandom | base64 | tr -d '/+=')"
echo "secrets made; the CA key stays in $dir/ca-key.pem"
