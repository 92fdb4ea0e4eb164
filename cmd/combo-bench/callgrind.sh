#!/usr/bin/env bash
# callgrind.sh: count the instructions Redis executes per report call, with
# valgrind's callgrind, which counts instructions, not seconds: the count
# repeats for the same redis-server and inputs whatever else the machine is
# doing, so a change to the report script can be weighed on a shared
# 2-core machine whose timings move by tens of percent between runs.
#
#   bash cmd/combo-bench/callgrind.sh [SIZE...]     # default: 1 8 50
#   REDIS_SERVER=/path/to/redis-server bash cmd/combo-bench/callgrind.sh 1
#
# For each SIZE it runs repo's BenchmarkReportRedisCPU/reports=SIZE (calls
# of SIZE reports, joins into 1,024 open windows after the first) twice,
# each against its own redis-server under callgrind, with N1 and N2
# reports, and prints (total(N2) - total(N1)) / (N2 - N1) per call and
# per report: start-up, the warm-up and the first opens cancel out. Each
# callgrind output is kept in $OUT (default a new temporary folder) for
# callgrind_annotate. Redis runs with --hz 1, since its timers' work
# (expiring keys, client upkeep) grows with the seconds a run takes under
# valgrind, not with the reports; and the benchmark's dedupe buckets are an
# hour, so a run does not cross into a new one (see benchRepo). Without
# the two, the count per report in calls of 50 moved by +-2% between runs
# of the same script; with them two runs agreed within 0.5%. Debian's
# redis-server is stripped, so for a breakdown by function build Redis
# from its source and pass it in REDIS_SERVER. Needs valgrind,
# redis-server, redis-cli, go. About 2 minutes for the three sizes.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=${*:-1 8 50}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go test -c -o "$BIN/repo.test" ./repo/

. cmd/combo-bench/lib.sh # free_port, alive

# count SIZE N NAME: the instructions of a redis-server that served N
# reports in calls of SIZE (and the benchmark's run of 1 before them).
count() {
  local size=$1 n=$2 name=$3 port pid
  port=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.out" \
    "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --hz 1 >"$OUT/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    # A server that failed to start (a port taken after all) says why in
    # its log; without this the benchmark's "connection refused" 40 s on
    # was all there was to read.
    alive "$pid" || { echo "redis-server under callgrind exited:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  COMBO_BENCH_REDIS_ADDR=127.0.0.1:$port "$BIN/repo.test" -test.run '^$' \
    -test.bench "ReportRedisCPU/reports=$size\$" -test.benchtime "${n}x" >"$OUT/$name.bench" 2>&1 ||
    { cat "$OUT/$name.bench" >&2; exit 1; }
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^totals:/ {print $2}' "$OUT/$name.out"
}

echo "redis: $("$REDIS_SERVER" --version)"
echo "callgrind outputs: $OUT"
printf '%8s %14s %16s\n' size instr/call instr/report
for size in $SIZES; do
  # Enough reports that the steady state dominates; the fewer, the faster.
  n1=$((size * 2000)); n2=$((size * 12000))
  [ "$size" -ge 8 ] && { n1=$((size * 400)); n2=$((size * 2400)); }
  a=$(count "$size" "$n1" "r$size-a")
  b=$(count "$size" "$n2" "r$size-b")
  awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" -v s="$size" \
    'BEGIN { r = (b - a) / (n2 - n1); printf "%8d %13.1fk %15.1fk\n", s, r * s / 1000, r / 1000 }'
done
