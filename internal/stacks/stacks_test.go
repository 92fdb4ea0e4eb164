package stacks

import (
	"strings"
	"sync"
	"testing"

	"github.com/combo-service/combo-service/internal/testwait"
)

// blocked starts n goroutines that wait on their own channel, and returns
// their numbers and the channels that end them. Every goroutine ends when
// the test does.
func blocked(t *testing.T, n int) ([]string, []chan struct{}) {
	t.Helper()
	ids := make([]string, n)
	ends := make([]chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		ends[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			ids[i] = Self()
			wg.Done()
			<-ends[i]
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, e := range ends {
			select {
			case <-e:
			default:
				close(e)
			}
		}
	})
	return ids, ends
}

// All lists every goroutine, however many: its dump is not cut short.
func TestAllListsEveryGoroutine(t *testing.T) {
	ids, _ := blocked(t, 2000)
	seen := map[string]bool{}
	for _, g := range All() {
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			seen[f[1]] = true
		}
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("All lists %d goroutines, not goroutine %s, which waits", len(seen), id)
		}
	}
}

// State finds the goroutine of that very number, not one whose number
// begins with it, and says when it has ended.
func TestStateFindsThatGoroutineOnly(t *testing.T) {
	ids, ends := blocked(t, 1)
	id := ids[0]
	state, stack, ok := State(id)
	if !ok || state != "chan receive" || !strings.Contains(stack, "blocked.func") {
		t.Fatalf("State(%s) of a goroutine waiting on its channel: %q, %v\n%s", id, state, ok, stack)
	}
	// Start goroutines, one at a time, until one's number begins with
	// id's; it waits, the others end at once.
	longer := ""
	end := make(chan struct{})
	defer close(end)
	for range 1 << 21 {
		got := make(chan string, 1)
		go func() {
			g := Self()
			got <- g
			if g != id && strings.HasPrefix(g, id) {
				<-end
			}
		}()
		if g := <-got; g != id && strings.HasPrefix(g, id) {
			longer = g
			break
		}
	}
	if longer == "" {
		t.Skipf("no goroutine number began with %s", id)
	}
	close(ends[0])
	testwait.For(t, "State("+id+") to say goroutine "+id+" ended, while goroutine "+longer+" waits", func() bool {
		_, _, ok := State(id)
		return !ok
	})
	if state, _, ok := State(longer); !ok || state != "chan receive" {
		t.Fatalf("State(%s) of a goroutine waiting on a channel: %q, %v", longer, state, ok)
	}
}
