# A node that runs containers: containerd (with runc), kube-proxy and the kubelet, in the node's
# network namespace (entered before this script) and in a private mount namespace (`unshare
# --mount --propagation private`), as root. Everything it starts joins the cgroup `$CGROUP` of
# every hierarchy first, so that whatever outlives it (runc's shims and the containers, which
# leave its process group) is found and ended there.
#
# Environment: DIR (the node's directory, holding the configuration files written by testenv and
# every file the node writes), CGROUP, KUBELET, KUBE_PROXY, IMAGES (archives to import, separated
# by newlines), SERVICE_RANGE (the cluster's ClusterIPs), FORWARD (empty, or `LISTEN_ADDRESS:PORT UPSTREAM_ADDRESS:PORT`: a TCP forwarder
# for the apiserver's advertised address when that is the node's own).
set -eu

for hierarchy in /sys/fs/cgroup/*/; do
  if [ -d "${hierarchy}${CGROUP}" ]; then echo $$ >"${hierarchy}${CGROUP}/cgroup.procs"; fi
done

# The host's files stay the host's: the kubelet writes kernel tunables (vm.overcommit_memory,
# kernel.panic, ...) unless they already have its values; here it writes copies.
mkdir -p "${DIR}/sysctl"
for key in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  [ -e "/proc/sys/${key}" ] || continue
  copy="${DIR}/sysctl/$(printf '%s' "${key}" | tr / _)"
  cat "/proc/sys/${key}" >"${copy}"
  mount --bind "${copy}" "/proc/sys/${key}"
done
# The kubelet and containerd create directories under /var/lib, /var/log and /run (pod network
# namespaces in /run/netns, shim sockets, iptables' lock) whatever their configuration says.
for dir in var-lib var-log; do mkdir -p "${DIR}/${dir}"; done
mount --bind "${DIR}/var-lib" /var/lib
mount --bind "${DIR}/var-log" /var/log
mount -t tmpfs -o mode=0755 testenv-run /run

ip link set lo up
# A real node routes the Service range (through its default route), so that kube-proxy's rules see
# host-network processes' connections to Services: here on the link, with no gateway, so that a
# packet no rule rewrote finds no neighbour and goes nowhere.
ip route add "${SERVICE_RANGE}" dev eth0
containerd --config "${DIR}/containerd.toml" >>"${DIR}/containerd.log" 2>&1 &
i=0
until ctr --address "${DIR}/containerd.sock" version >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "${i}" -gt 300 ]; then echo "containerd did not start" >&2; exit 1; fi
  sleep 0.1
done
printf '%s\n' "${IMAGES}" | while IFS= read -r image; do
  [ -n "${image}" ] || continue
  ctr --address "${DIR}/containerd.sock" --namespace k8s.io images import "${image}"
done

if [ -n "${FORWARD}" ]; then
  listen="${FORWARD%% *}"
  socat "TCP-LISTEN:${listen##*:},bind=${listen%:*},fork,reuseaddr" "TCP:${FORWARD#* }" \
    >>"${DIR}/forward.log" 2>&1 &
fi
"${KUBE_PROXY}" --config="${DIR}/kube-proxy.json" >>"${DIR}/kube-proxy.log" 2>&1 &
exec "${KUBELET}" "$@"
