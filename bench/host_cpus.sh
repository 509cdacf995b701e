#!/usr/bin/env bash
# The cores of one simulated host (bench/netcluster.sh --pin):
#     host_cpus.sh INDEX HOSTS CPUS
# prints the cores host INDEX (0-based) of HOSTS runs on, out of CPUS (the cores
# the cluster may use, as Linux lists them: "0-3,6"), comma-separated. Each host
# gets a share of its own (the first host the first share) as a real host has
# cores of its own; with more hosts than cores, host i gets core i mod n, so the
# neighbours of a ring (i, i + 1) never share one.
set -eu

[ $# -eq 3 ] || { echo "usage: host_cpus.sh INDEX HOSTS CPUS" >&2; exit 2; }
index=$1 hosts=$2
cpus=()
IFS=, read -r -a parts <<< "$3"
for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then
        for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
    else
        cpus+=("$part")
    fi
done
n=${#cpus[@]}
[ "$n" -gt 0 ] && [ "$hosts" -gt 0 ] && [ "$index" -lt "$hosts" ] \
    || { echo "host_cpus.sh: host $index of $hosts on cores '$3'" >&2; exit 2; }
if [ "$hosts" -ge "$n" ]; then
    echo "${cpus[$((index % n))]}"
else
    per=$((n / hosts))
    (IFS=,; echo "${cpus[*]:$((index * per)):$per}")
fi
