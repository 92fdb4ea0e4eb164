package repo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// replyError is an error reply of Redis's, as go-redis gives one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// answerFlushesWith answers each flush script of a pipeline with the
// reply of the same index in replies, in place of Redis's.
type answerFlushesWith struct{ replies []error }

func (h answerFlushesWith) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h answerFlushesWith) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h answerFlushesWith) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil || len(cmds) != len(h.replies) || cmds[0].Name() != "evalsha" {
			return err
		}
		for i, c := range cmds {
			c.SetErr(h.replies[i])
		}
		return cmds[0].Err() // as go-redis: the first command's error
	}
}

// A batch's flush where one window's answer says Redis cannot serve it now
// (TRYAGAIN, CLUSTERDOWN, LOADING) fails as unavailable, to be sent again
// whole, even when an earlier window's answer is an error of its own (a
// window whose record does not parse), which is the pipeline's first.
func TestFlushAnsweredUnavailableForOneWindowIsUnavailable(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r, _ := subscribedRepo(t, rdb)
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base), contribution(2, "lily", base)}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
	if err != nil || len(ws) != 2 {
		t.Fatalf("read %v %v", ws, err)
	}
	untilDue(t, r, ws[1:])
	rdb.AddHook(answerFlushesWith{[]error{
		replyError("BADWINDOW the stored record does not parse"),
		replyError("TRYAGAIN Multiple keys request during rehashing of slot"),
	}})
	if _, err := r.Flush(ctx, ws); !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("flush with a window answered TRYAGAIN after one answered BADWINDOW: %v, want ErrUnavailable", err)
	}
}
