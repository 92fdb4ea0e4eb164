package conf

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the tests without the caller's COMBO_* variables: Load reads
// the environment over every file and default, and a shell that exported
// one (README configures the service, and the demo's defaults, by them)
// would otherwise fail tests that set nothing of the kind.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COMBO_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
