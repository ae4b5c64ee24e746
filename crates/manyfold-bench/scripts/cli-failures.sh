#!/usr/bin/env bash
# The command line's failure signals (issue 19), measured on 127.0.0.1:
# how long after an event the other side reports it and exits.
#   connect to a closed port · kill -9 of the receiver during send ·
#   the same with ICMP dropped by nftables (in a namespace of its own; root)
#   · SIGINT of the sender, and of the receiver, during send.
# Usage: cli-failures.sh [path/to/manyfold] [runs]
# Prints one Markdown row per case: median and max of `runs` runs.
set -euo pipefail
MF=${1:-./target/release/manyfold}
RUNS=${2:-5}
WORK=$(mktemp -d)
NS=mfcli$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
head -c 400M /dev/urandom > "$WORK/big"
now() { date +%s.%N; }
ms() { echo "($2 - $1) * 1000" | bc -l | xargs printf '%.0f'; }
port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
row() { # name target samples...
    local name=$1 target=$2; shift 2
    local sorted; sorted=$(printf '%s\n' "$@" | sort -n)
    local n=$#; local med; med=$(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p")
    echo "| $name | $n | ${med} ms | $(echo "$sorted" | tail -1) ms | $target |"
}
# Waits until the file $1 holds text $2 (bounded).
wait_for() { for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# 1. connect to a closed port.
s=()
for _ in $(seq "$RUNS"); do
    p=$(port); t0=$(now)
    if "$MF" send -q --to "127.0.0.1:$p" "$WORK/big" 2>"$WORK/err"; then echo "send to a closed port succeeded" >&2; exit 1; fi
    s+=("$(ms "$t0" "$(now)")")
    grep -qi refused "$WORK/err" || { echo "no 'refused' in: $(cat "$WORK/err")" >&2; exit 1; }
done
row "send to a closed port: exits, 'connection refused'" "≤ 50 ms" "${s[@]}"
echo "  (message: $(head -1 "$WORK/err"))" >&2

# 2. kill -9 of the receiver mid-send: the sender's exit.
run_kill() { # $1: command prefix (empty, or ip netns exec NS)
    local pfx=("$@") p; p=$(port)
    mkdir -p "$WORK/out"; rm -rf "$WORK/out"/*
    "${pfx[@]}" "$MF" recv --listen "127.0.0.1:$p" --dir "$WORK/out" --once -q >/dev/null 2>&1 &
    local rpid=$!
    sleep 0.3
    "${pfx[@]}" "$MF" send --rate 40MB --peer-timeout 5 --to "127.0.0.1:$p" "$WORK/big" -q 2>"$WORK/serr" &
    local spid=$!
    sleep 1.5
    kill -9 "$rpid"; local t0; t0=$(now)
    wait "$spid" && { echo "the sender exited 0 after its receiver was killed" >&2; exit 1; }
    ms "$t0" "$(now)"
    wait "$rpid" 2>/dev/null || true
}
s=()
for _ in $(seq "$RUNS"); do s+=("$(run_kill)"); done
row "kill -9 of the receiver during send: sender exits non-zero" "≤ 1 s" "${s[@]}"
echo "  (message: $(head -1 "$WORK/serr"))" >&2

# 3. the same with ICMP dropped (a namespace with its own loopback).
if [ "$(id -u)" = 0 ] && command -v nft >/dev/null; then
    ip netns add "$NS"; ip -n "$NS" link set lo up
    printf 'table ip f { chain out { type filter hook output priority 0; icmp type destination-unreachable drop; }; }\n' |
        ip netns exec "$NS" nft -f -
    s=()
    for _ in $(seq "$RUNS"); do s+=("$(run_kill ip netns exec "$NS")"); done
    row "same, ICMP dropped (--peer-timeout 5): sender exits non-zero" "≤ 5 s + 1 s" "${s[@]}"
    echo "  (message: $(head -1 "$WORK/serr"))" >&2
fi

# 4. SIGINT of one side mid-send: the other side's report and exit.
run_int() { # $1: which side is interrupted (sender | receiver)
    local p; p=$(port); rm -rf "$WORK/out"/*
    "$MF" recv --listen "127.0.0.1:$p" --dir "$WORK/out" --once 2>"$WORK/rerr" >/dev/null &
    local rpid=$!
    sleep 0.3
    "$MF" send --rate 40MB --to "127.0.0.1:$p" "$WORK/big" 2>"$WORK/serr" >/dev/null &
    local spid=$!
    sleep 1.5
    local victim=$spid other=$rpid log=$WORK/rerr
    [ "$1" = receiver ] && { victim=$rpid; other=$spid; log=$WORK/serr; }
    kill -INT "$victim"; local t0; t0=$(now)
    wait "$other" && { echo "the $1's peer exited 0" >&2; exit 1; }
    ms "$t0" "$(now)"
    wait "$victim" 2>/dev/null || true
    grep -qi interrupted "$log" || { echo "no 'interrupted' in: $(tail -2 "$log")" >&2; exit 1; }
}
s=(); for _ in $(seq "$RUNS"); do s+=("$(run_int sender)"); done
row "SIGINT of the sender: receiver reports it and exits" "≤ 1 s" "${s[@]}"
echo "  (message: $(grep -i interrupted "$WORK/rerr" | head -1))" >&2
s=(); for _ in $(seq "$RUNS"); do s+=("$(run_int receiver)"); done
row "SIGINT of the receiver: sender reports it and exits" "≤ 1 s" "${s[@]}"
echo "  (message: $(grep -i interrupted "$WORK/serr" | head -1))" >&2
