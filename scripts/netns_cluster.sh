#!/usr/bin/env bash
# A multi-host test bed on one machine: N network namespaces ("hosts") joined by a bridge that
# lives in a namespace of its own, so nothing touches this machine's interfaces and no packet
# leaves it. Host i has eth0 = 10.0.0.i/24 (the seed's addresses: 10.0.0.1:1234, 10.0.0.2:2345).
#   netns_cluster.sh up N [RATE]     create hosts 1..N (RATE, e.g. 1gbit: a tbf limit on each link)
#   netns_cluster.sh exec I CMD...   run CMD on host I
#   netns_cluster.sh blackhole I     host I's link drops every packet, both ways, with no reset
#                                    (its bridge port goes down: the host still sees its eth0 up)
#   netns_cluster.sh link_down I     host I's eth0 goes down (its sends fail at once)
#   netns_cluster.sh restore I       undoes either
#   netns_cluster.sh down            removes every namespace it made
# Needs root and iproute2; `up` exits 77 (CTest's skip code) where namespaces cannot be made.
# This kernel has tbf but no sch_netem: delay needs a user-space stand-in (not here yet).
set -euo pipefail
prefix=${KERAS_NETNS_PREFIX:-kerasnet}
hub=$prefix-hub

host_ns() { echo "$prefix-h$1"; }
port_of() { echo "p$1"; }  # host i's bridge port, in the hub

down() {
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$prefix-(hub|h[0-9]+)$" || true); do
    # Processes still inside a host would keep its namespace alive: end them first.
    for pid in $(ip netns pids "$ns" 2> /dev/null || true); do kill -9 "$pid" 2> /dev/null || true; done
    ip netns del "$ns" 2> /dev/null || true
  done
}

up() {
  local hosts=$1 rate=${2:-}
  if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null; then
    echo "skipped: the namespace test bed needs root and iproute2"
    exit 77
  fi
  if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 200 ]; then
    echo "netns_cluster.sh up: 1 to 200 hosts, got $hosts" >&2
    exit 2
  fi
  down
  if ! ip netns add "$hub" 2> /dev/null; then
    echo "skipped: cannot create network namespaces here (ip netns add failed)"
    exit 77
  fi
  ip netns exec "$hub" ip link add br0 type bridge
  ip netns exec "$hub" ip link set br0 up
  for i in $(seq "$hosts"); do
    local ns
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    # The pair is made in the hub, then one end moves into the host as eth0.
    ip netns exec "$hub" ip link add "$(port_of "$i")" type veth peer name "eth0-$i"
    ip netns exec "$hub" ip link set "eth0-$i" netns "$ns"
    ip netns exec "$ns" ip link set "eth0-$i" name eth0
    ip netns exec "$ns" ip addr add "10.0.0.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$hub" ip link set "$(port_of "$i")" master br0
    ip netns exec "$hub" ip link set "$(port_of "$i")" up
    if [ -n "$rate" ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
    fi
  done
  # Host 1 reaches host N over TCP before we return (bounded: 5 s).
  local last
  last=$(host_ns "$hosts")
  ip netns exec "$last" python3 -c "
import socket; s = socket.socket(); s.bind(('10.0.0.$hosts', 7)); s.listen(); s.settimeout(5)
try: s.accept()
except OSError: pass" &
  local listener=$!
  for _ in $(seq 50); do
    if ip netns exec "$(host_ns 1)" python3 -c "
import socket; socket.create_connection(('10.0.0.$hosts', 7), timeout=1).close()" 2> /dev/null; then
      wait "$listener" || true
      return 0
    fi
    sleep 0.1
  done
  kill "$listener" 2> /dev/null || true
  echo "the test bed's hosts do not reach each other" >&2
  down
  exit 1
}

case "${1:-}" in
  up) up "${2:?up N [RATE]}" "${3:-}" ;;
  exec)
    i=${2:?exec I CMD...}
    shift 2
    exec ip netns exec "$(host_ns "$i")" "$@"
    ;;
  blackhole) ip netns exec "$hub" ip link set "$(port_of "${2:?blackhole I}")" down ;;
  link_down) ip netns exec "$(host_ns "${2:?link_down I}")" ip link set eth0 down ;;
  restore)
    ip netns exec "$hub" ip link set "$(port_of "${2:?restore I}")" up
    ip netns exec "$(host_ns "$2")" ip link set eth0 up
    ;;
  down) down ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac
