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
#   netns_cluster.sh delay I MS [LOSS_PERCENT]
#                                    packets arriving at host I wait MS milliseconds (and that
#                                    share of them is dropped): netem's delay and loss, which
#                                    this kernel lacks, by tests/netns/packet_delay.cpp (path in
#                                    $KERAS_PACKET_DELAY) on an NFQUEUE of iptables-legacy
#   netns_cluster.sh down            removes every namespace it made
# Needs root and iproute2; `up` exits 77 (CTest's skip code) where namespaces cannot be made.
# This kernel has tbf but no sch_netem, so delay and loss come from a user-space stand-in
# (`delay`). It acts on a host's incoming packets, not its outgoing ones: a packet held on its
# sender counts against TCP's small-queue limit (about 1 ms of the pacing rate), and with 5 ms
# of delay there BBR's rate estimate collapsed to 9 Mbit/s; held on arrival, the sender's copy
# is already freed, as a packet in flight on a wire. Delay d on every host is d each way.
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
  delay)
    i=${2:?delay I MS [LOSS_PERCENT]}
    milliseconds=${3:?delay I MS [LOSS_PERCENT]}
    loss=${4:-0}
    tool=${KERAS_PACKET_DELAY:?set KERAS_PACKET_DELAY to the packet_delay program (build/ci/tests/packet_delay)}
    if ! command -v iptables-legacy > /dev/null; then
      echo "skipped: delay needs iptables-legacy (Debian's iptables package)"
      exit 77
    fi
    ns=$(host_ns "$i")
    # --queue-bypass: while no program listens, packets pass rather than being dropped.
    ip netns exec "$ns" iptables-legacy -A INPUT -i eth0 -j NFQUEUE --queue-num 0 --queue-bypass
    log=$(mktemp)
    ip netns exec "$ns" "$tool" --queue 0 --delay-ms "$milliseconds" --loss-percent "$loss" --seed "$i" \
      > "$log" 2>&1 &
    # Bounded: it says "ready" once the queue is bound (5 s at most).
    for _ in $(seq 50); do
      grep -q ready "$log" && break
      if ! kill -0 $! 2> /dev/null; then cat "$log" >&2; rm -f "$log"; exit 1; fi
      sleep 0.1
    done
    grep -q ready "$log" || { echo "packet_delay did not start on host $i" >&2; cat "$log" >&2; rm -f "$log"; exit 1; }
    rm -f "$log"
    ;;
  restore)
    ip netns exec "$hub" ip link set "$(port_of "${2:?restore I}")" up
    ip netns exec "$(host_ns "$2")" ip link set eth0 up
    ;;
  down) down ;;
  *)
    sed -n '2,23p' "$0"
    exit 2
    ;;
esac
