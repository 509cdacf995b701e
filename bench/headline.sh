#!/usr/bin/env bash
# The headline comparison (make bench): compressed vs plain MPI collectives
# (python -m mpicomp.bench headline) on a simulated cluster where this machine
# can build one, else on local ranks.
#
#   bench/headline.sh [HEADLINE OPTIONS...]     (e.g. --plot bench-headline.png --quick)
#
# The simulated cluster (bench/netcluster.sh: HOSTS network namespaces of PPN
# ranks each, every link shaped to RATE) is used when this runs as root with
# 'ip' and 'tc' on PATH and a trial cluster of 2 hosts runs a job; then
#
#   bench/netcluster.sh --hosts HOSTS --ppn PPN --rate RATE -- python -m mpicomp.bench headline ...
#
# Otherwise it prints '# simulated cluster not used: REASON' and runs
#
#   mpiexec -n HOSTS*PPN python -m mpicomp.bench headline ...
#
# on this machine (shared memory). Either way the first line on stdout says
# where the job runs, and the benchmark's --where says it again in its header
# and plot. Exits with the benchmark's exit status (netcluster.sh's 2 when
# the cluster, once tried successfully, cannot be built for the run).
#
# Environment: HOSTS (4), PPN (1), RATE (1gbit), PIN (1) as for netcluster.sh;
# NETCLUSTER=0 runs on local ranks without trying the cluster; MPIEXEC
# (default: mpiexec on PATH) and PYTHON (default: python on PATH), which the
# ranks run.
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOSTS=${HOSTS:-4}
PPN=${PPN:-1}
RATE=${RATE:-1gbit}
PIN=${PIN:-1}
PYTHON=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || true)}
export MPIEXEC

# why_no_cluster: prints why the simulated cluster cannot be used here, or nothing
why_no_cluster() {
    [ "${NETCLUSTER:-1}" != 0 ] || { echo "NETCLUSTER=0"; return; }
    [ "$(id -u)" = 0 ] || { echo "not root (network namespaces and tc need root)"; return; }
    command -v ip >/dev/null 2>&1 || { echo "no 'ip' (iproute2) on PATH"; return; }
    command -v tc >/dev/null 2>&1 || { echo "no 'tc' (iproute2) on PATH"; return; }
    local err
    # try it: 2 shaped hosts, one rank each, running 'true'
    if ! err=$(MPIEXEC_TIMEOUT=60 "$HERE/netcluster.sh" --hosts 2 --ppn 1 --rate "$RATE" \
                   -- true 2>&1 >/dev/null); then
        echo "a trial cluster of 2 hosts failed: $(printf '%s\n' "$err" | tail -n 1)"
    fi
}

reason=$(why_no_cluster)
if [ -z "$reason" ]; then
    pin=$([ "$PIN" = 0 ] && echo --no-pin || echo --pin)
    where="simulated cluster: $HOSTS hosts x $PPN rank(s), links shaped to $RATE each way"
    [ "$PIN" = 0 ] || where="$where, each host on cores of its own"
    echo "# $where (bench/netcluster.sh --hosts $HOSTS --ppn $PPN --rate $RATE $pin)"
    exec "$HERE/netcluster.sh" --hosts "$HOSTS" --ppn "$PPN" --rate "$RATE" "$pin" -- \
        "$PYTHON" -m mpicomp.bench headline --where "$where" "$@"
fi
ranks=$((HOSTS * PPN))
echo "# simulated cluster not used: $reason"
[ -n "$MPIEXEC" ] || { echo "headline.sh: no mpiexec on PATH (or set MPIEXEC)" >&2; exit 2; }
exec "$MPIEXEC" -n "$ranks" "$PYTHON" -m mpicomp.bench headline \
    --where "local ranks: $ranks on this machine (simulated cluster not used: $reason)" "$@"
