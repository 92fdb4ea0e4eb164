package deploy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/internal/rpcserver"
)

// checkExampleMemory holds the example's memory limit to the large
// requests the service decodes at once, with GOMEMLIMIT below it (README,
// "Sizing a replica's memory": set it to about 80% of the container's
// limit; requests waiting for room hold their bytes too, bounded only at
// 1 GiB in all, which is why README asks for few concurrent polls). The
// large requests decoded at once (rpcserver.MaxLargeInFlightBytes, two of the
// largest MergeLatest pages) cost about four times their size while in
// flight (inflight.go): a limit below that is an OOM kill for a gateway
// polling with large pages, which GOMEMLIMIT cannot prevent, since that
// memory is live.
func checkExampleMemory(t *testing.T, limitMemory, goMemLimit string) {
	t.Helper()
	limit, ok := k8sBytes(limitMemory)
	if !ok {
		t.Errorf("resources.limits.memory %q: want a limit in Ki, Mi or Gi", limitMemory)
		return
	}
	soft, ok := goBytes(goMemLimit)
	if !ok {
		t.Errorf("GOMEMLIMIT %q: want it set, in KiB, MiB or GiB (README: about 80%% of the container's memory limit)", goMemLimit)
		return
	}
	if need := int64(4 * rpcserver.MaxLargeInFlightBytes); soft < need {
		t.Errorf("GOMEMLIMIT %s is below the %d MiB the large requests admitted at once may hold (4 × rpcserver.MaxLargeInFlightBytes)",
			goMemLimit, need>>20)
	}
	if soft > limit*9/10 {
		t.Errorf("GOMEMLIMIT %s leaves under a tenth of the %s limit: the GC acts only once the container is nearly out",
			goMemLimit, limitMemory)
	}
}

// k8sBytes reads a Kubernetes memory quantity with a binary suffix.
func k8sBytes(q string) (int64, bool) {
	return scaled(q, map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30})
}

// goBytes reads a GOMEMLIMIT value with a binary suffix.
func goBytes(v string) (int64, bool) {
	return scaled(v, map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30})
}

func scaled(v string, units map[string]int64) (int64, bool) {
	for suffix, unit := range units {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			if i, err := strconv.ParseInt(n, 10, 64); err == nil && i > 0 {
				return i * unit, true
			}
		}
	}
	return 0, false
}
