#!/usr/bin/env bash
# The "ssh" of the simulated cluster (bench/netcluster.sh): MPICH's hydra runs
#     launch_in_netns.sh [ssh options] HOST COMMAND...
# to start its proxy on HOST; this script runs COMMAND in HOST's network
# namespace instead, as ssh would run it on a remote machine (the words joined
# by spaces and handed to a shell, with the caller's environment, working
# directory included, since nothing crosses a machine here).
#
# HOST is one of the addresses netcluster.sh gave its hosts; it reads the map
# from the environment it exports:
#   NETCLUSTER_NS_PREFIX  namespace names: ${NETCLUSTER_NS_PREFIX}h0, h1, ...
#   NETCLUSTER_HOSTS      the hosts' addresses, comma-separated, host 0 first
#   NETCLUSTER_CPUS       with --pin: the cores the hosts share out (host_cpus.sh)
#   NETCLUSTER_DEBUG=1    print each launch on stderr
set -u

while [ $# -gt 0 ]; do
    case "$1" in
        -[1246AaCfGgKkMNnqsTtVvXxYy]*) shift ;;   # ssh flags without a value
        -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;     # ssh options with a value
        -[BbcDEeFIiJLlmOoPpQRSWw]*) shift ;;      # ... value attached
        --) shift; break ;;
        *) break ;;
    esac
done
if [ $# -lt 1 ]; then
    echo "launch_in_netns.sh: usage: launch_in_netns.sh [ssh options] HOST COMMAND..." >&2
    exit 255
fi
host=${1#*@}
shift
if [ -z "${NETCLUSTER_NS_PREFIX:-}" ] || [ -z "${NETCLUSTER_HOSTS:-}" ]; then
    echo "launch_in_netns.sh: NETCLUSTER_NS_PREFIX/NETCLUSTER_HOSTS unset (run through netcluster.sh)" >&2
    exit 255
fi

ns=
i=0
IFS=, read -r -a addrs <<< "$NETCLUSTER_HOSTS"
for a in "${addrs[@]}"; do
    if [ "$a" = "$host" ] || [ "h$i" = "$host" ]; then
        ns="${NETCLUSTER_NS_PREFIX}h$i"
        break
    fi
    i=$((i + 1))
done
if [ -z "$ns" ]; then
    echo "launch_in_netns.sh: unknown host '$host' (hosts: $NETCLUSTER_HOSTS)" >&2
    exit 255
fi
if [ "${NETCLUSTER_DEBUG:-0}" = 1 ]; then
    echo "launch_in_netns.sh: $host -> netns $ns: $*" >&2
fi
if [ -n "${NETCLUSTER_CPUS:-}" ]; then   # netcluster.sh --pin: the host's own cores
    mine=$("$(dirname "${BASH_SOURCE[0]}")/host_cpus.sh" "$i" "${#addrs[@]}" "$NETCLUSTER_CPUS") \
        || exit 255
    exec taskset -c "$mine" ip netns exec "$ns" bash -c "$*"
fi
exec ip netns exec "$ns" bash -c "$*"
