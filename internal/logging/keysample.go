package logging

import (
	"sync"
	"time"
)

// keySampler passes the first line of each key, then at most one a second,
// and counts the lines it holds back in between. Klog and NetpollWriter
// sample by it where zap's sampler, keyed by the whole message, would
// thin nothing: their lines name peers and errors; Sampled by level and
// message. It reads the monotonic clock, which no step of the host's
// clock moves.
type keySampler struct {
	mu   sync.Mutex
	seen map[string]keySample
	now  func() time.Time
}

type keySample struct {
	at         time.Time // the last line written
	suppressed int       // lines suppressed since
	since      time.Time // the first of them
}

// maxSampledKeys bounds the keys a keySampler holds (see pass).
const maxSampledKeys = 1024

func newKeySampler() *keySampler {
	return &keySampler{seen: map[string]keySample{}, now: time.Now}
}

// pass reports whether a line of key may be written now, and how many of
// key's lines were suppressed before it, the first at since.
func (s *keySampler) pass(key string) (ok bool, suppressed int, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, st := s.now(), s.seen[key]
	if st.at.IsZero() && len(s.seen) >= maxSampledKeys {
		// The keys (Kitex's formats, netpoll's lines, the service's
		// messages) are far fewer; a bound all the same, over which the
		// keys idle for a second with no count to report are forgotten
		// (their next line would pass anyway). A new key still past it
		// is written, unsampled, and the others keep their counts.
		for k, old := range s.seen {
			if old.suppressed == 0 && now.Sub(old.at) >= time.Second {
				delete(s.seen, k)
			}
		}
		if len(s.seen) >= maxSampledKeys {
			return true, 0, time.Time{}
		}
	}
	if !st.at.IsZero() && now.Sub(st.at) < time.Second {
		if st.suppressed == 0 {
			st.since = now
		}
		st.suppressed++
		s.seen[key] = st
		return false, 0, time.Time{}
	}
	s.seen[key] = keySample{at: now}
	return true, st.suppressed, st.since
}
