package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// scriptSender answers each attempt as its script says, and checks what
// the Reporter promises of every attempt it makes.
type scriptSender struct {
	t      *testing.T
	script []byte
	batch  int

	mu       sync.Mutex
	n        int
	busy     map[int64]int // key (user id) -> attempts under way holding it
	acked    []int64       // ids of successful attempts, in order
	failures []string
}

func (s *scriptSender) fail(format string, args ...any) {
	s.mu.Lock()
	s.failures = append(s.failures, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *scriptSender) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	items := req.GetContributions()
	keys := map[int64]bool{}
	for _, c := range items {
		keys[c.UserId] = true
	}
	s.mu.Lock()
	op := byte(0)
	if len(s.script) > 0 {
		op = s.script[s.n%len(s.script)]
	}
	s.n++
	for k := range keys {
		if s.busy[k] > 0 {
			s.failures = append(s.failures, fmt.Sprintf("attempt %d: key %d is in another attempt under way", s.n, k))
		}
		s.busy[k]++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for k := range keys {
			s.busy[k]--
		}
		s.mu.Unlock()
	}()
	if len(items) == 0 || len(items) > s.batch {
		s.fail("attempt of %d items, BatchSize %d", len(items), s.batch)
	}
	switch op % 12 {
	case 5:
		return nil, errors.New("connection reset by peer")
	case 6:
		k := int(op/12) % len(items)
		return nil, &combo.ComboError{Code: CodeInvalidArgument, Message: fmt.Sprintf("contributions[%d].quantity: must be 1..1000000", k)}
	case 7:
		return nil, &combo.ComboError{Code: CodeInvalidArgument, Message: "contributions: must hold 1..1000 items"}
	case 8:
		return nil, &combo.ComboError{Code: 2, Message: "redis unavailable"}
	case 9:
		return &combo.ReportContributionsResponse{}, nil
	case 10:
		panic("sender bug")
	case 11:
		time.Sleep(time.Millisecond)
	}
	resp := &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(items))}
	for i, c := range items {
		resp.Results[i] = &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity, Duplicate: op%12 == 4}
	}
	s.mu.Lock()
	for _, c := range items {
		s.acked = append(s.acked, c.Id)
	}
	s.mu.Unlock()
	return resp, nil
}

// FuzzReporterAccountsForEveryContribution: whatever the service answers
// (success, transport errors, INVALID_ARGUMENT naming an item or not,
// UNAVAILABLE, malformed responses, a panicking sender), once Close
// returns every contribution Report took was acknowledged exactly once or
// handed to OnDrop exactly once, never both; quantities are conserved;
// Stats balance; batches respect BatchSize and never share a key while in
// an attempt; and with nothing dropped, each key's contributions were
// acknowledged in Report order.
func FuzzReporterAccountsForEveryContribution(f *testing.F) {
	f.Add([]byte{3, 2, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, []byte{0})
	f.Add([]byte{1, 1, 0, 1, 1, 1, 1}, []byte{5, 5, 0})
	f.Add([]byte{5, 3, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}, []byte{6, 18, 30, 0, 7, 0})
	f.Add([]byte{2, 2, 1, 0, 0, 0, 0}, []byte{9, 10, 8, 0})
	f.Fuzz(func(t *testing.T, data, script []byte) {
		if len(data) < 3 {
			return
		}
		batch := int(data[0]%5) + 1
		opts := ReporterOptions{
			QueueSize: 64, BatchSize: batch, Linger: time.Millisecond, Concurrency: int(data[1]%3) + 1,
			MaxRetries: int(data[2]%4) - 1, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			RPCTimeout: time.Second,
		}
		if opts.MaxRetries == 0 {
			opts.MaxRetries = -1
		}
		s := &scriptSender{t: t, script: script, batch: batch, busy: map[int64]int{}}
		var dmu sync.Mutex
		dropped := map[int64]int{}
		opts.OnDrop = func(b []*combo.Contribution, err error) {
			dmu.Lock()
			defer dmu.Unlock()
			for _, c := range b {
				dropped[c.Id]++
			}
		}
		r, err := NewReporter(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		accepted := map[int64]*combo.Contribution{}
		var order []int64
		for i, b := range data[3:] {
			if i >= 48 {
				break
			}
			c := &combo.Contribution{Id: int64(i) + 1, ActivityId: 1, UserId: int64(b%4) + 1, ItemId: 1, ItemType: "rose",
				Quantity: int32(b>>2) + 1, CreatedAt: 1732950000000 + int64(i)}
			if err := r.Report(context.Background(), c); err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
			accepted[c.Id] = c
			order = append(order, c.Id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		dmu.Lock()
		defer dmu.Unlock()
		for _, m := range s.failures {
			t.Error(m)
		}
		ackN := map[int64]int{}
		for _, id := range s.acked {
			ackN[id]++
		}
		var in, out int64
		for id, c := range accepted {
			in += int64(c.Quantity)
			a, d := ackN[id], dropped[id]
			if a+d != 1 {
				t.Errorf("id %d: acknowledged %d times, dropped %d times", id, a, d)
			}
			out += int64(a+d) * int64(c.Quantity)
		}
		for id := range ackN {
			if accepted[id] == nil {
				t.Errorf("id %d acknowledged, never reported", id)
			}
		}
		if in != out {
			t.Errorf("quantities: %d reported, %d acknowledged or dropped", in, out)
		}
		st := r.Stats()
		if st.Queued != 0 || st.InFlight != 0 || st.Accepted != uint64(len(accepted)) || st.Accepted != st.Sent+st.Dropped ||
			st.Dropped != uint64(len(dropped)) {
			t.Errorf("stats %+v with %d accepted, %d dropped", st, len(accepted), len(dropped))
		}
		if len(dropped) == 0 {
			last := map[int64]int64{}
			pos := map[int64]int{}
			for i, id := range order {
				pos[id] = i
			}
			for _, id := range s.acked {
				k := accepted[id].UserId
				if p, ok := last[k]; ok && pos[p] > pos[id] {
					t.Errorf("key %d: id %d acknowledged after id %d, reported before it", k, id, p)
				}
				last[k] = id
			}
		}
	})
}
