#!/usr/bin/env bash
# Installs what testenv's container nodes need (tests/installed, testenv's container_cluster test)
# from Debian's packages when missing: containerd and runc, the CNI plugins, iptables and conntrack
# (kube-proxy), socat (the forwarder of a control-plane node's advertised address) and busybox-static
# (the tests' busybox image). Needs root; a no-op when everything is there.
set -euo pipefail
packages=(containerd runc containernetworking-plugins iptables conntrack socat busybox-static)
# The file each package provides, to tell whether it is installed.
probes=(/usr/bin/containerd /usr/sbin/runc /usr/lib/cni/bridge /usr/sbin/iptables /usr/sbin/conntrack /usr/bin/socat /bin/busybox)
missing=()
for i in "${!packages[@]}"; do
  [[ -e "${probes[i]}" ]] || missing+=("${packages[i]}")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-node-runtime: missing ${missing[*]}; run as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-node-runtime: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
