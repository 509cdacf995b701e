#!/usr/bin/env bash
# A simulated multi-host cluster on one machine, for the collective benchmarks.
#
#   bench/netcluster.sh [--hosts N] [--ppn K] [--rate RATE] [--burst B] [--no-pin] [--] COMMAND...
#
# builds N "hosts" (network namespaces) on one "switch" (a bridge in a
# namespace of its own), every host linked to it by a veth pair whose two
# directions are each shaped by a token bucket (tc tbf) to RATE, like a
# full-duplex NIC of that speed on a switch port; then runs
#
#   mpiexec -launcher ssh -launcher-exec bench/launch_in_netns.sh \
#           -hosts <the hosts' addresses> -ppn K -n N*K COMMAND...
#
# from host 0, with MPICH forced onto TCP (MPIR_CVAR_CH4_NETMOD=ofi,
# FI_PROVIDER=tcp, FI_TCP_IFACE=eth0) so that traffic between hosts crosses
# the shaped links instead of shared memory. Ranks on one host are one node
# for MPI (Split_type(COMM_TYPE_SHARED) groups the K ranks of a host; MPICH
# moves their messages through shared memory, unshaped, as on a real node).
# Exits with COMMAND's (mpiexec's) exit status.
#
# Options (defaults from the environment variables of the same name):
#   --hosts N    hosts (HOSTS, default 4; 1 to 200)
#   --ppn K      ranks per host (PPN, default 1)
#   --rate RATE  each link's speed in each direction, in tc's units:
#                100mbit, 1gbit, 10gbit ... (RATE, default 1gbit); "none"
#                leaves the links unshaped (to see what TCP alone costs)
#   --burst B    the token bucket's size, at least 2kb (BURST, default auto: what
#                RATE sends in 2 ms, at least 32kb; 244 KiB at 1gbit): at most B
#                bytes leave a host back to back faster than RATE, so any message
#                much larger than B is shaped. The bucket must hold what the link
#                sends between two refills of the qdisc's timer: with 32kb at
#                1gbit a link here moved 1 MiB messages at 0.47 Gbit/s (6 ring
#                steps of 1 MiB: 111 ms, against 50 ms at the nominal rate),
#                with 256kb at 0.97 Gbit/s (52 ms)
#   --pin        (PIN=1, the default) each host runs on cores of its own, as a real
#                host does: the cores this script may use are shared out between the
#                hosts in order (bench/host_cpus.sh; more hosts than cores: host i on
#                core i mod n, so ring neighbours i and i + 1 never share one).
#                Unpinned, the kernel places and moves the hosts' processes as it
#                likes, and the time of the same compressed call moved by up to 1.8x
#                from run to run here (docs/performance/collectives.md)
#   --no-pin     (PIN=0) leave placement to the kernel
# Environment:
#   MPIEXEC          the mpiexec to run (default: the one on PATH); PATH and
#                    every other variable reach the ranks unchanged, so a
#                    virtual environment's python is the ranks' python
#   MPIEXEC_TIMEOUT  seconds after which mpiexec ends a hung job (default 600)
#   MPICOMP_THREADS  codec threads per rank (default: this machine's cores / all ranks,
#                    since the simulated hosts share them)
#   MPICOMP_CACHE_DIR  the calibrations' folder; the ranks get its subfolder
#                    netcluster-RATE (one per shaped rate; unless MPICOMP_CALIBRATION
#                    names a file)
#   NETCLUSTER_DEBUG=1  print every launch and the MPI transport on stderr
#
# Needs root, ip and tc (iproute2), and a kernel with network namespaces,
# veth, bridge and tbf; refuses with exit status 2 otherwise. Everything it
# creates lives in its own namespaces (named mpicomp-<pid>-h0 ... and
# mpicomp-<pid>-sw), with addresses of the private subnet 10.77.0.0/24 that
# exists only inside them; nothing is added to the caller's namespace. All of
# it, and every process left in it, is removed when the script ends: normally,
# on an error, or on SIGINT/SIGTERM/SIGHUP (what a run killed with SIGKILL
# leaves, the next run removes).
#
# Measured on a 2-core machine, plain MPI_Allreduce of 16 MiB float32 per rank,
# 4 hosts x 1 rank: 220 to 260 ms at 1gbit (the wire alone needs about 200 ms;
# TCP/IP framing and CPU make the rest), 60 to 80 ms with --rate none, 20 to 30 ms
# with plain mpiexec (shared memory). With --ppn 2, an 8 MiB Sendrecv between
# the two ranks of a host took 3.5 ms, between hosts at 100mbit 720 ms.
#
# Example (4 hosts at 1 Gbit/s, one rank each):
#   sudo PATH="$PWD/.venv/bin:$PATH" bench/netcluster.sh --hosts 4 --rate 1gbit -- \
#       python -m mpicomp.bench allreduce --sizes 16M
set -u

PROG=netcluster.sh
SUBNET=10.77.0            # host i is $SUBNET.$((i + 1)), on a /24
IFACE=eth0                # each host's link, inside its namespace
LATENCY=100ms             # tbf: the longest a packet may wait in the queue

usage() {
    cat >&2 <<EOF
usage: $PROG [--hosts N] [--ppn K] [--rate RATE|none] [--burst B] [--no-pin] [--] COMMAND...
  runs 'mpiexec -n N*K COMMAND...' on N simulated hosts (network namespaces),
  K ranks each, every link shaped to RATE each way (defaults: \$HOSTS or 4,
  \$PPN or 1, \$RATE or 1gbit, \$BURST or auto: 2 ms of RATE, at least 32kb), each
  host on cores of its own unless --no-pin (\$PIN=0); needs root, ip and tc.
  The header of this script says more.
EOF
}

die() {   # die STATUS MESSAGE...
    local status=$1
    shift
    echo "$PROG: $*" >&2
    exit "$status"
}

HOSTS=${HOSTS:-4}
PPN=${PPN:-1}
RATE=${RATE:-1gbit}
BURST=${BURST:-auto}
PIN=${PIN:-1}

while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) [ $# -ge 2 ] || die 2 "--hosts needs a value"; HOSTS=$2; shift 2 ;;
        --hosts=*) HOSTS=${1#*=}; shift ;;
        --ppn) [ $# -ge 2 ] || die 2 "--ppn needs a value"; PPN=$2; shift 2 ;;
        --ppn=*) PPN=${1#*=}; shift ;;
        --rate) [ $# -ge 2 ] || die 2 "--rate needs a value"; RATE=$2; shift 2 ;;
        --rate=*) RATE=${1#*=}; shift ;;
        --burst) [ $# -ge 2 ] || die 2 "--burst needs a value"; BURST=$2; shift 2 ;;
        --burst=*) BURST=${1#*=}; shift ;;
        --pin) PIN=1; shift ;;
        --no-pin) PIN=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) usage; die 2 "unknown option '$1'" ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { usage; die 2 "no COMMAND to run"; }
case "$HOSTS" in ''|*[!0-9]*) die 2 "--hosts must be a whole number, got '$HOSTS'" ;; esac
case "$PPN" in ''|*[!0-9]*) die 2 "--ppn must be a whole number, got '$PPN'" ;; esac
HOSTS=$((10#$HOSTS)); PPN=$((10#$PPN))
[ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 200 ] \
    || die 2 "--hosts must be between 1 and 200, got $HOSTS"
[ "$PPN" -ge 1 ] || die 2 "--ppn must be at least 1, got $PPN"
case "$PIN" in 0|1) ;; *) die 2 "PIN must be 0 or 1, got '$PIN'" ;; esac
case "$RATE" in ''|*[!0-9A-Za-z.]*) die 2 "--rate must look like 100mbit or 1gbit, got '$RATE'" ;; esac
# auto: what RATE sends in 2 ms, at least 32kb (a rate in tc's units: bit, kbit, mbit,
# gbit, tbit, or bps, kbps, mbps, gbps in bytes per second)
if [ "$BURST" = auto ]; then
    BURST=$(awk -v r="$RATE" 'BEGIN {
        split("bit 1 kbit 1e3 mbit 1e6 gbit 1e9 tbit 1e12 bps 8 kbps 8e3 mbps 8e6 gbps 8e9", t, " ")
        for (i = 1; i < 18; i += 2) unit[t[i]] = t[i + 1]
        unit[""] = 1
        b = 32768
        if (match(r, /^[0-9]+(\.[0-9]+)?/)) {
            u = tolower(substr(r, RLENGTH + 1))
            if (u in unit) { v = substr(r, 1, RLENGTH) * unit[u] / 8 * 0.002; if (v > b) b = v }
        }
        printf "%db\n", b
    }')
fi
# the burst in bytes, with tc's size units (b, k/kb, kbit, m/mb, mbit, g/gb, gbit)
burst_bytes=$(awk -v s="$BURST" 'BEGIN {
    split("b 1 k 1024 kb 1024 kbit 128 m 1048576 mb 1048576 mbit 131072 g 1073741824 " \
          "gb 1073741824 gbit 134217728", t, " ")
    for (i = 1; i < 22; i += 2) unit[t[i]] = t[i + 1]
    unit[""] = 1
    if (!match(s, /^[0-9]+(\.[0-9]+)?/)) { print -1; exit }
    u = tolower(substr(s, RLENGTH + 1))
    if (!(u in unit)) { print -1; exit }
    printf "%d\n", substr(s, 1, RLENGTH) * unit[u]
}')
[ "$burst_bytes" -ge 2048 ] 2>/dev/null \
    || die 2 "--burst must be a size of at least 2kb (a whole packet must fit), got '$BURST'"

# --- what it needs --------------------------------------------------------
[ "$(id -u)" = 0 ] \
    || die 2 "needs root (it creates network namespaces and shapes their links); run it as root"
command -v ip >/dev/null 2>&1 || die 2 "needs 'ip' (iproute2), which is not on PATH"
command -v setsid >/dev/null 2>&1 || die 2 "needs 'setsid' (util-linux), which is not on PATH"
command -v tc >/dev/null 2>&1 || die 2 "needs 'tc' (iproute2), which is not on PATH"
[ "$PIN" = 0 ] || command -v taskset >/dev/null 2>&1 \
    || die 2 "needs 'taskset' (util-linux) to give each host its cores, which is not on" \
             "PATH (or run with --no-pin)"
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || true)}
[ -n "$MPIEXEC" ] && [ -x "$MPIEXEC" ] \
    || die 2 "no mpiexec: put MPICH's mpiexec on PATH or set MPIEXEC"
MPIEXEC=$(readlink -f "$MPIEXEC")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAUNCHER=$HERE/launch_in_netns.sh
[ -x "$LAUNCHER" ] || die 2 "$LAUNCHER is missing or not executable"

PREFIX="mpicomp-$$-"
SWITCH="${PREFIX}sw"
CREATED=()                # namespaces made so far, removed at the end
CHILD=                    # the pid of the job
STATUS=0

# --- cleanup, on every way out --------------------------------------------
cleanup() {
    trap '' INT TERM HUP
    if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
        kill -TERM "$CHILD" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$CHILD" 2>/dev/null || break
            sleep 0.5
        done
    fi
    local ns pids any
    # processes still inside our namespaces (ranks, proxies) are ours: end them, again
    # until none is left (a proxy may still be starting ranks while the first round runs)
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        any=
        for ns in "${CREATED[@]}"; do
            pids=$(ip netns pids "$ns" 2>/dev/null) || continue
            if [ -n "$pids" ]; then
                any=1
                kill -KILL $pids 2>/dev/null
            fi
        done
        [ -z "$any" ] && break
        sleep 0.2
    done
    for ns in "${CREATED[@]}"; do
        ip netns del "$ns" 2>/dev/null || echo "$PROG: could not remove namespace $ns" >&2
    done
    CREATED=()
}
on_exit() {
    local rc=$?
    cleanup
    exit "$rc"
}
on_signal() {   # on_signal STATUS
    echo "$PROG: interrupted, cleaning up" >&2
    exit "$1"     # runs on_exit
}
trap on_exit EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

must() {   # must COMMAND...: run it, or stop (status 2) saying what failed
    local msg
    msg=$("$@" 2>&1) || die 2 "'$*' failed: $msg"
}

newns() {
    ip netns add "$1" 2>/dev/null \
        || die 2 "could not create network namespace $1 (does this kernel support" \
                 "network namespaces, and is /run/netns writable?)"
    CREATED+=("$1")
    must ip -n "$1" link set lo up
}

shape() {   # shape NAMESPACE DEVICE
    [ "$RATE" = none ] && return 0
    tc -n "$1" qdisc replace dev "$2" root tbf rate "$RATE" burst "$BURST" \
        latency "$LATENCY" 2>/dev/null \
        || die 2 "tc could not shape $2 in $1 with 'tbf rate $RATE burst $BURST'" \
                 "(a bad --rate/--burst, or a kernel without sch_tbf)"
}

# --- leftovers of a run that could not clean up (killed with SIGKILL) -------
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(mpicomp-[0-9][0-9]*-[a-z0-9]*\).*/\1/p'); do
    owner=${ns#mpicomp-}
    owner=${owner%%-*}
    [ -d "/proc/$owner" ] && continue          # its script still runs
    echo "$PROG: removing $ns, left by an ended run (pid $owner)" >&2
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
done

# --- build ----------------------------------------------------------------
newns "$SWITCH"
ip -n "$SWITCH" link add br0 type bridge 2>/dev/null \
    || die 2 "could not create a bridge (kernel without bridge support?)"
must ip -n "$SWITCH" link set br0 up
ADDRS=()
for ((i = 0; i < HOSTS; i++)); do
    ns="${PREFIX}h$i"
    newns "$ns"
    # the pair is created in the switch's namespace with its host end placed
    # straight into the host's namespace: it never appears anywhere else
    ip -n "$SWITCH" link add "p$i" type veth peer name "$IFACE" netns "$ns" 2>/dev/null \
        || die 2 "could not create a veth pair (kernel without veth support?)"
    must ip -n "$SWITCH" link set "p$i" master br0
    must ip -n "$SWITCH" link set "p$i" up
    addr="$SUBNET.$((i + 1))"
    must ip -n "$ns" addr add "$addr/24" dev "$IFACE"
    must ip -n "$ns" link set "$IFACE" up
    shape "$ns" "$IFACE"          # what the host sends
    shape "$SWITCH" "p$i"         # what the host receives
    ADDRS+=("$addr")
done
HOSTLIST=$(IFS=,; echo "${ADDRS[*]}")

if [ "$RATE" = none ]; then
    shaping="links not shaped"
else
    shaping="every link $RATE each way (tbf burst $BURST)"
fi
echo "$PROG: $HOSTS hosts x $PPN ranks ($((HOSTS * PPN)) ranks), $shaping," \
     "namespaces ${PREFIX}h0..h$((HOSTS - 1)), $SUBNET.0/24: $*" >&2

# --- run ------------------------------------------------------------------
export NETCLUSTER_NS_PREFIX="$PREFIX" NETCLUSTER_HOSTS="$HOSTLIST"
export MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE="$IFACE"
export MPIEXEC_TIMEOUT="${MPIEXEC_TIMEOUT:-600}"
# The simulated hosts share this machine's cores: give each rank its share of codec
# threads (on a real cluster each node's ranks divide that node's cores, which
# mpicomp works out by itself from the launcher's local rank count).
if [ -z "${MPICOMP_THREADS:-}" ]; then
    export MPICOMP_THREADS=$(( $(nproc) / (HOSTS * PPN) > 0 ? $(nproc) / (HOSTS * PPN) : 1 ))
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# A calibration is cached per layout, thread budget, host and MPI library, none of which
# tells one shaped rate from another: each rate keeps its calibrations in a folder of its
# own, so a job at 1gbit never takes the model's numbers measured at 400mbit
if [ -z "${MPICOMP_CALIBRATION:-}" ]; then
    export MPICOMP_CACHE_DIR="${MPICOMP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpicomp}/netcluster-$RATE"
fi
if [ "${NETCLUSTER_DEBUG:-0}" = 1 ]; then
    export MPIR_CVAR_DEBUG_SUMMARY=1
fi
# mpiexec runs in a session of its own: a Ctrl-C (SIGINT to the foreground process
# group) reaches this script alone, whose trap ends the job; were mpiexec in the group
# too, it could catch the signal and exit first, and bash, seeing its child exit
# normally, would take the signal as handled and skip the trap
PINNED=()
if [ "$PIN" = 1 ]; then
    export NETCLUSTER_CPUS
    NETCLUSTER_CPUS=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    PINNED=(taskset -c "$("$HERE/host_cpus.sh" 0 "$HOSTS" "$NETCLUSTER_CPUS")")
fi
"${PINNED[@]}" ip netns exec "${PREFIX}h0" setsid "$MPIEXEC" -launcher ssh -launcher-exec "$LAUNCHER" \
    -iface "$IFACE" -hosts "$HOSTLIST" -ppn "$PPN" -n $((HOSTS * PPN)) "$@" &
CHILD=$!
wait "$CHILD"
STATUS=$?
CHILD=
exit "$STATUS"
