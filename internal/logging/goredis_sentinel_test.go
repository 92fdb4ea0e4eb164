package logging

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/testredis"
)

// RedisLogger tells go-redis's routine Sentinel news from its failures by
// the text of go-redis's own log formats (redisNews), which go-redis does
// not promise. TestRedisLoggerSaysSentinelNewsAtInfo feeds it copies of
// those formats, so it passes whatever go-redis now prints. Here go-redis
// itself logs: a healthy start through two Sentinels must leave its news at
// info and no go-redis warning, so an upgrade that rewords a format fails
// here instead of turning every start's news into warnings.
func TestGoRedisSentinelStartLogsNoWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and two Sentinels")
	}
	master := testredis.Start(t, testredis.Options{})
	sentinels := testredis.StartSentinels(t, 2, "combo", master)
	core, logs := observer.New(zapcore.DebugLevel)
	redis.SetLogger(Redis(zap.New(core)))
	t.Cleanup(func() { redis.SetLogger(Redis(zap.NewNop())) })
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.Addr)
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "combo", SentinelAddrs: addrs, MaxRetries: -1})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the Sentinels asked in vain log as they are canceled
	_ = rdb.Close()
	news := 0
	for _, e := range logs.FilterLoggerName("go-redis").All() {
		if e.Level >= zapcore.WarnLevel {
			t.Errorf("go-redis logged %q at %s on a healthy start: a format redisNews no longer matches?", e.Message, e.Level)
		}
		if strings.HasPrefix(e.Message, "sentinel: selected addr=") {
			news++
		}
	}
	if news == 0 {
		t.Errorf("no \"sentinel: selected addr=\" line from go-redis at start: %v", logs.All())
	}
}
