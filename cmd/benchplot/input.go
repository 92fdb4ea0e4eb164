package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// run is the part of a combo-bench result the plot needs; the field names
// are combo-bench's JSON names.
type run struct {
	Mode       string  `json:"mode"`
	Offered    float64 `json:"offered_windows_per_s"`
	Throughput float64 `json:"reports_per_s"`
	Pushes     *struct {
		WindowsMissing int64 `json:"windows_missing"`
		Lag            struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
			Max float64 `json:"max_ms"`
		} `json:"push_lag"`
	} `json:"pushes"`
}

// readRuns reads every JSON document in files: combo-bench prints a list of
// runs, or for compare an object holding one; both are accepted, and a file
// may hold several documents.
func readRuns(files []string) ([]run, error) {
	var all []run
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(fh)
		for docs := 0; ; docs++ {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) && docs == 0 {
				// A run cut short before its output, most likely: the
				// median would silently stand on one run fewer.
				err = errors.New("no JSON document")
			} else if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fh.Close()
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			rs, err := decodeDoc(raw)
			if err != nil {
				fh.Close()
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			all = append(all, rs...)
		}
		fh.Close()
	}
	return all, nil
}

// doc is an object document: one run, or a compare holding its runs.
type doc struct {
	run
	Runs []run `json:"runs"`
}

// decodeDoc decodes raw once, as the shape its first byte says it is: tried
// as each shape in turn, a run's field of the wrong type failed them all,
// and the error named the last shape tried, or a compare object's runs
// failed and it was read as one empty run, dropped without a word.
func decodeDoc(raw json.RawMessage) ([]run, error) {
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		var list []run
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
		return list, nil
	}
	var d doc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	if d.Runs != nil {
		return d.Runs, nil
	}
	return []run{d.run}, nil
}

// point is the median of the runs at one offered rate.
type point struct {
	Offered                float64
	Runs                   int
	Throughput             float64
	LagP50, LagP99, LagMax float64
	Missing                int64 // largest over the runs: a loss must not hide in a median
}

func medians(runs []run) []point {
	by := make(map[float64][]run)
	for _, r := range runs {
		if r.Mode == "rate" && r.Pushes != nil && r.Offered > 0 {
			by[r.Offered] = append(by[r.Offered], r)
		}
	}
	var pts []point
	for offered, rs := range by {
		med := func(f func(run) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			return median(v)
		}
		p := point{
			Offered: offered, Runs: len(rs),
			Throughput: med(func(r run) float64 { return r.Throughput }),
			LagP50:     med(func(r run) float64 { return r.Pushes.Lag.P50 }),
			LagP99:     med(func(r run) float64 { return r.Pushes.Lag.P99 }),
			LagMax:     med(func(r run) float64 { return r.Pushes.Lag.Max }),
		}
		for _, r := range rs {
			p.Missing = max(p.Missing, r.Pushes.WindowsMissing)
		}
		pts = append(pts, p)
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].Offered < pts[j].Offered })
	return pts
}

// median of v (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
