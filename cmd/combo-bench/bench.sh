#!/usr/bin/env bash
# bench.sh: reproduce every figure of issue 4 on this machine, 3 runs each.
# It starts its own redis-server and combo-service (and, for the load part,
# combo-floor) on free loopback ports, drives them with combo-bench, writes
# every run's JSON to $OUT, stops what it started, and prints medians.
# Needs go, redis-server, redis-cli, jq, ss (iproute2) and shuf; it checks
# for them first, since without jq its checks at the end would find nothing
# and say every run conserved.
#
#   bash cmd/combo-bench/bench.sh [OUT] [RUNS]
#   PARTS="rate" bash cmd/combo-bench/bench.sh   # only some parts: load rate memory
#
# The machine is shared (2 cores): before each run it waits (up to 90 s) for
# the CPU to be at least 85% idle, and records the idle share it saw.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/combo-bench-results}
RUNS=${2:-3}
PARTS=${PARTS:-"load rate memory"}
has() { [[ " $PARTS " == *" $1 "* ]]; }
for tool in go redis-server redis-cli jq ss shuf; do
  command -v "$tool" >/dev/null || { echo "bench.sh needs $tool on PATH" >&2; exit 1; }
done
BIN=$(mktemp -d)
mkdir -p "$OUT"

. cmd/combo-bench/lib.sh # free_port

cpu_idle() { # idle share over one second, from /proc/stat
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local tot=0 i
  for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  echo $(( 100 * (b[4] - a[4]) / (tot > 0 ? tot : 1) ))
}

wait_idle() {
  local t=0 idle
  while idle=$(cpu_idle); [ "$idle" -lt 85 ] && [ $t -lt 90 ]; do t=$((t + 1)); done
  echo "$idle"
}

# The commit built (with "+changes" if the service's files differ from it),
# taken now: the tree may change while the runs go on. It titles the plot.
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- . ':!docs' ':!BENCHMARKS.md' ':!cmd/combo-bench' ':!cmd/benchplot' 2>/dev/null || rev="$rev+changes"
echo "== building $rev" >&2
go build -o "$BIN/combo-service" .
go build -o "$BIN/combo-bench" ./cmd/combo-bench
go build -o "$BIN/benchplot" ./cmd/benchplot
go build -o "$BIN/combo-floor" ./cmd/combo-floor

read -r RP SP MP < <(free_ports 3) # distinct: none listens yet
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$BIN/redis.pid" --logfile "$BIN/redis.log"
SVC_PID= FLOOR_PID=
stop_service() { [ -n "$SVC_PID" ] && kill -TERM "$SVC_PID" 2>/dev/null && wait "$SVC_PID" 2>/dev/null; SVC_PID=; }
stop_floor() { [ -n "$FLOOR_PID" ] && kill -TERM "$FLOOR_PID" 2>/dev/null && wait "$FLOOR_PID" 2>/dev/null; FLOOR_PID=; }
cleanup() { stop_service || true; stop_floor || true; redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true; }
trap cleanup EXIT

start_service() { # $1 = window size, $2 = window.dedupe (default 60s), $3 = window.stale (default 60s)
  COMBO_REDIS_ADDR=127.0.0.1:$RP COMBO_SERVER_ADDR=127.0.0.1:$SP COMBO_METRICS_ADDR=127.0.0.1:$MP \
    COMBO_LOG_LEVEL=warn COMBO_WINDOW_SIZE=$1 COMBO_WINDOW_DEDUPE=${2:-60s} COMBO_WINDOW_STALE=${3:-60s} \
    "$BIN/combo-service" 2>>"$OUT/service.log" &
  SVC_PID=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$SP " && return; sleep 0.1; done
  echo "service did not start" >&2; exit 1
}

bench() { # $1 = output name, rest = combo-bench flags
  local name=$1; shift
  local idle; idle=$(wait_idle)
  echo "== $(date +%T) $name (cpu idle before: ${idle}%)" >&2
  "$BIN/combo-bench" -addr 127.0.0.1:$SP -redis 127.0.0.1:$RP -service-pid "$SVC_PID" -service-metrics 127.0.0.1:$MP \
    -json -label "idle=${idle}" "$@" > "$OUT/$name.json" || {
    # 3: printed, but not conserved; the check at the end names the run.
    local rc=$?; [ "$rc" -eq 3 ] || return "$rc"
  }
}

# combo-floor: the service's Kitex server with handlers that do no work. The
# compare runs end with single reports against it: what any implementation
# could reach over this RPC layer on this machine.
start_floor() {
  FP=$(free_port)
  "$BIN/combo-floor" -addr 127.0.0.1:$FP 2>>"$OUT/floor.log" &
  FLOOR_PID=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$FP " && return; sleep 0.1; done
  echo "combo-floor did not start" >&2; exit 1
}

start_service 3s
has load && start_floor
for i in $(seq "$RUNS"); do
  if has load; then
    bench "compare-c32-$i" -mode compare -c 32 -d 10s -floor 127.0.0.1:$FP -floor-pid "$FLOOR_PID"
    bench "single-c8-$i" -mode single -c 8 -d 10s
  fi
  if has rate; then
    # 64 senders, so the bench is not what caps the offered rate.
    for r in 500 1000 2000 4000; do
      bench "rate-$r-$i" -mode rate -rate $r -d 10s -c 64
    done
  fi
done
stop_service
stop_floor

# Dedupe ids live in per-bucket SETs that expire as a whole, up to three
# buckets (3 x window.dedupe) after their first id: a memory run must start
# only when earlier runs' sets and windows are gone, or their expiry during
# the fill would be subtracted from its per-window figure. combo-bench
# -memory waits for that itself (-wait-clean, naming the keys from the
# service's key builder). The load runs' sets (window.dedupe 60s) take up
# to 3 minutes; the memory service runs with window.dedupe 20s so its own
# are gone within one (bytes per id do not depend on it).

# The memory runs open 100,000 windows in about 2 s, and they all come due
# together 50 s later: the service flushes such a burst in 2-3 s here. With
# the default window.stale (60 s) only 9.8 s would be left after due, which
# other work on a shared machine once used up (1d28673's memory-3 dropped
# 4,174 windows as stale): stale is set well past the burst.
# window.dedupe is 20 s, below W + grace (the service warns of it at
# start): these runs retry nothing, and shorter buckets expire sooner, so
# the wait before each memory run is shorter.
if has memory; then
  start_service 50s 20s 5m
  for i in $(seq "$RUNS"); do
    # A window pushed again would be by a claimer: claim_idle (W + grace +
    # 2s = 52.2 s) after the entry was read, at its open here, and found by
    # a scan every claim_idle / 2, so up to 78.3 s after its open, 28 s after
    # its first push: these runs listen 30 s for it (the default, W + grace
    # + 3s, covers the load and rate runs, read and pushed W + grace apart).
    bench "memory-$i" -memory -wait-clean 240s -windows 100000 -b 100 -c 8 -window 50s -late-horizon 30s
    # A probe's windows stay open, so each probe must fit below the next
    # level: 5,000 reports measure 1k-6k, 10k-15k, 50k-55k and 100k-105k.
    bench "curve-$i" -curve -levels 1000,10000,50000,100000 -probe 5000 -b 100 -c 8 -window 50s -late-horizon 30s
  done
  stop_service
fi

if has rate; then
  # Beside the runs it is drawn from, as each round keeps it in
  # docs/bench/runs/<commit>/; the plot BENCHMARKS.md shows is redrawn by
  # hand from a chosen round (its "Push lag against load" says how).
  "$BIN/benchplot" -o "$OUT/push-lag.png" \
    -title "combo-service $rev: push lag and throughput vs offered new windows/s" "$OUT"/rate-*.json
fi

# Every service run must conserve (per combo key, pushed = acknowledged).
unconserved=$(jq -r 'input_filename as $f | [.. | objects | select(has("conserved")) | .conserved]
  | select(any(. == false)) | $f' "$OUT"/*.json 2>/dev/null || true)
if [ -n "$unconserved" ]; then
  echo "NOT CONSERVED (a window missing, pushed twice, a quantity off, or a new report answered duplicate) in:" $unconserved
else
  echo "every run conserved"
fi
# Conservation holds over what was acknowledged: a run whose RPCs failed
# (every one, at worst) is conserved over less. Say which.
with_errors=$(jq -r 'input_filename as $f | [.. | objects | select(has("errors")) | .errors]
  | select(any(. > 0)) | $f' "$OUT"/*.json 2>/dev/null || true)
if [ -n "$with_errors" ]; then
  echo "RPC ERRORS (see each run's errors and first_error) in:" $with_errors
else
  echo "no run had an RPC error"
fi
# A VM whose host gives its vCPUs to others (steal) runs slower without
# showing it in the per-process CPU figures: name the runs that lost 2% or
# more of the machine's CPU time to it (each mode's share is in its JSON).
stolen=$(jq -r 'input_filename as $f | [.. | objects | select(has("machine_steal_share")) | .machine_steal_share]
  | select(length > 0 and max >= 0.02) | "\($f | split("/") | last) (\(max * 1000 | round / 10)%)"' "$OUT"/*.json 2>/dev/null || true)
if [ -n "$stolen" ]; then
  echo "STEAL (the VM lost 2% or more of its CPU time to others during; the worst mode's share) in:" $stolen
else
  echo "no run lost 2% of the machine's CPU time to steal"
fi

# Medians of the runs, as benchplot and the docs take them: the mean of
# the two middle values of an even number of runs.
med() { jq -s "map($1) | sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end" "${@:2}"; }
echo
if has load; then
echo "compare (C=32, 10 s): median reports/s and ratio over naive"
for m in 0 1 2 3; do
  printf '  %-9s %8.0f/s  p50 %6.2f ms  p99 %6.2f ms\n' \
    "$(jq -r ".runs[$m].mode" "$OUT/compare-c32-1.json")" \
    "$(med ".runs[$m].reports_per_s" "$OUT"/compare-c32-*.json)" \
    "$(med ".runs[$m].rpc_latency.p50_ms" "$OUT"/compare-c32-*.json)" \
    "$(med ".runs[$m].rpc_latency.p99_ms" "$OUT"/compare-c32-*.json)"
done
printf '  single: %.1f reports per Redis pipeline, %.0f%% of pipelines with one report, one in flight %.0f%% of the time\n' \
  "$(med '.runs[1].report_pipelines.reports_per_pipeline' "$OUT"/compare-c32-*.json)" \
  "$(med '.runs[1].report_pipelines.one_report_share * 100' "$OUT"/compare-c32-*.json)" \
  "$(med '.runs[1].report_pipelines.pipelines_in_flight * 100' "$OUT"/compare-c32-*.json)"
printf '  floor:  %8.0f/s (single reports against combo-floor: the RPC layer alone)\n' \
  "$(med '.runs[4].reports_per_s' "$OUT"/compare-c32-*.json)"
for k in single_vs_naive batch50_vs_naive reporter_vs_naive floor_vs_naive single_vs_floor; do
  printf '  %-18s %5.2fx\n' "$k" "$(med ".ratios.$k" "$OUT"/compare-c32-*.json)"
done
printf 'single C=8: %.0f/s, p50 %.2f ms, p99 %.2f ms\n' \
  "$(med '.[0].reports_per_s' "$OUT"/single-c8-*.json)" \
  "$(med '.[0].rpc_latency.p50_ms' "$OUT"/single-c8-*.json)" \
  "$(med '.[0].rpc_latency.p99_ms' "$OUT"/single-c8-*.json)"
fi
if has rate; then
echo "rate (10 s, 64 senders): offered, median achieved/s, push lag p50/p99/max ms, most windows missing in a run"
for r in 500 1000 2000 4000; do
  printf '  %5d %8.0f %6.1f %6.1f %6.1f %4d\n' "$r" \
    "$(med '.[0].reports_per_s' "$OUT"/rate-$r-*.json)" "$(med '.[0].pushes.push_lag.p50_ms' "$OUT"/rate-$r-*.json)" \
    "$(med '.[0].pushes.push_lag.p99_ms' "$OUT"/rate-$r-*.json)" "$(med '.[0].pushes.push_lag.max_ms' "$OUT"/rate-$r-*.json)" \
    "$(jq -s 'map(.[0].pushes.windows_missing) | max' "$OUT"/rate-$r-*.json)"
done
fi
if has memory; then
printf 'memory: %.0f bytes per open window (window string %.0f, dedupe id %.0f, rest %.0f)\n' \
  "$(med '.bytes_per_open_window' "$OUT"/memory-*.json)" "$(med '.window_bytes_avg' "$OUT"/memory-*.json)" \
  "$(med '.dedupe_member_bytes_avg' "$OUT"/memory-*.json)" "$(med '.stream_bytes_per_entry' "$OUT"/memory-*.json)"
echo "curve: level, open windows (probe start-end), median reports/s, p50 ms, Redis CPU µs/report, script µs/report, reports per script call"
for l in 0 1 2 3; do
  printf '  %7d %7d-%-7d %8.0f %6.2f %6.1f %6.1f %5.1f\n' "$(jq ".points[$l].level" "$OUT/curve-1.json")" \
    "$(jq ".points[$l].open_windows" "$OUT/curve-1.json")" "$(jq ".points[$l].open_windows_after" "$OUT/curve-1.json")" \
    "$(med ".points[$l].reports_per_s" "$OUT"/curve-*.json)" "$(med ".points[$l].p50_ms" "$OUT"/curve-*.json)" \
    "$(med ".points[$l].cpu.redis_cpu_ms_per_1k" "$OUT"/curve-*.json)" \
    "$(med ".points[$l].script_usec_per_report" "$OUT"/curve-*.json)" "$(med ".points[$l].reports_per_script_call" "$OUT"/curve-*.json)"
done
fi
