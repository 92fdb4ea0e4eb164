package worker

import (
	"cmp"
	"math"
	"strconv"
	"strings"
)

// maxID returns the larger stream id ("ms-seq").
func maxID(a, b string) string {
	if a == "" || compareIDs(b, a) > 0 {
		return b
	}
	return a
}

// prevID is the largest stream id before id ("0-0" for the smallest).
func prevID(id string) string {
	ms, seq := splitID(id)
	switch {
	case seq > 0:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10)
	case ms > 0:
		return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10)
	}
	return "0-0"
}

// nextID is the smallest stream id after id.
func nextID(id string) string {
	ms, seq := splitID(id)
	if seq == math.MaxUint64 {
		return strconv.FormatUint(ms+1, 10) + "-0"
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
}

func compareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
