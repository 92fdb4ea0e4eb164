#!/bin/bash
set -u
cd /tmp/ab
RP=16399; SP=18899; MP=19199
redis-server --port $RP --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --pidfile /tmp/ab/redis.pid --logfile /tmp/ab/redis.log
sleep 0.5
COMBO_REDIS_ADDR=127.0.0.1:$RP COMBO_SERVER_ADDR=127.0.0.1:$SP COMBO_METRICS_ADDR=127.0.0.1:$MP COMBO_LOG_LEVEL=warn COMBO_WINDOW_SIZE=3s ./combo-service 2>>/tmp/ab/service.log &
SVC=$!
sleep 2
for round in 1 2 3; do
  for conc in 4 8 16; do
    ./combo-bench -addr 127.0.0.1:$SP -redis 127.0.0.1:$RP -service-pid $SVC -mode reporter -c 32 -d 10s -reporter-conc $conc -late-horizon 0 -json -label "conc=$conc round=$round" > rep-$conc-$round.json 2>>bench.err
  done
  ./combo-bench -addr 127.0.0.1:$SP -redis 127.0.0.1:$RP -service-pid $SVC -mode naive -c 32 -d 10s -late-horizon 0 -json -label "naive round=$round" > naive-$round.json 2>>bench.err
done
kill $SVC; wait $SVC
redis-cli -p $RP shutdown nosave
echo done > /tmp/ab/DONE
