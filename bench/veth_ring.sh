#!/usr/bin/env bash
# Where the live ladder's frames go missing above 100 kpps: the veth's own
# receive ring, whether or not the capture runs.
#
#   scripts/testbed --queues 2 -- bench/veth_ring.sh [RUNS] [KPPS]   (root; needs a release build)
#
# For each run: `weir count xdp:` on the capturing end, the veth's receive
# work in kernel threads pinned to CPU 1 at SCHED_FIFO (as bench/live.py
# puts it, at priority $PRIO, 50 by default), then 2 s of 64-byte frames at
# KPPS (200 by default) from `weir replay --xdp` pinned to CPU 0, once with
# weir running and once with it stopped (SIGSTOP) for the whole send. Prints
# the sending veth's tx_queue_0_xdp_xmit_errors (frames the receiving
# queue's 256-entry ring had no room for: they never reach any XDP program
# or socket) and the hypervisor's steal over the send, in 10 ms ticks.
set -euo pipefail
runs=${1:-3}
kpps=${2:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
weir=${CARGO_TARGET_DIR:-$root/target}/release/weir
pcap=$root/bench/work/veth-ring-64B.pcap
[ -x "$weir" ] || { echo "no $weir: cargo build --release -p weir-cli" >&2; exit 2; }
[ -n "${TB_RX_NS:-}" ] || { echo "run me under scripts/testbed --queues 2 --" >&2; exit 2; }
mkdir -p "$(dirname "$pcap")"
[ -f "$pcap" ] || python3 -c "
import sys; sys.path.insert(0, '$root/bench')
import generator; generator.write_pcap('$pcap', [generator.frame(64, 0)])"
ip -n "$TB_RX_NS" addr flush dev "$TB_RX_IF"
errors() { ip netns exec "$TB_TX_NS" ethtool -S "$TB_TX_IF" | awk '/tx_queue_0_xdp_xmit_errors/{print $2}'; }
steal() { awk '/^cpu /{print $9}' /proc/stat; }
one() {
    ip netns exec "$TB_RX_NS" "$weir" count -q xdp:"$TB_RX_IF"@0-1 --take-host-traffic > /dev/null 2>&1 &
    local w=$!
    sleep 1
    ip netns exec "$TB_RX_NS" sh -c "echo 1 > /sys/class/net/$TB_RX_IF/threaded"
    for pid in $(ps -eo pid=,comm= | awk -v r="napi/$TB_RX_IF-" 'index($2, r) == 1 {print $1}'); do
        taskset -pc 1 "$pid" > /dev/null
        chrt -f -p "${PRIO:-50}" "$pid"
    done
    [ "$1" = stopped ] && kill -STOP "$w"
    local e0 s0
    e0=$(errors); s0=$(steal)
    taskset -c 0 "$weir" replay -q --netns "$TB_TX_NS" --xdp "$TB_TX_IF" --vary-ports 1024 --loop 0 \
        -c $((kpps * 2000)) --pps $((kpps * 1000)) "$pcap" > /dev/null 2>&1
    echo "weir $1: $(( $(errors) - e0 )) frames the ring had no room for, $(( $(steal) - s0 )) ticks stolen"
    [ "$1" = stopped ] && kill -CONT "$w"
    kill -INT "$w"; wait "$w" || true
}
for _ in $(seq "$runs"); do one running; one stopped; done
