package deploy_test

import (
	"regexp"
	"strings"
	"testing"
)

// go.mod's toolchain line names the first Go whose standard library has
// the fixes govulncheck finds this service reaching (README: Known
// vulnerabilities). The official golang images set GOTOOLCHAIN=local,
// which ignores that line: a golang:1.26 cached before it would build the
// image without them. The build stage must set GOTOOLCHAIN=auto before its
// first go command.
func TestDockerfileBuildHonoursTheToolchainLine(t *testing.T) {
	if !regexp.MustCompile(`(?m)^toolchain go\d+\.\d+\.\d+\s*$`).MatchString(read(t, "go.mod")) {
		t.Skip("go.mod has no toolchain line")
	}
	auto := false
	for _, in := range dockerfile(t) {
		switch in[0] {
		case "ENV":
			if f := strings.Fields(in[1]); len(f) > 0 && (f[0] == "GOTOOLCHAIN=auto" || (f[0] == "GOTOOLCHAIN" && len(f) == 2 && f[1] == "auto")) {
				auto = true
			}
		case "RUN":
			if strings.Contains(" "+in[1], " go ") {
				if !auto {
					t.Fatalf("the build stage runs %q before setting ENV GOTOOLCHAIN=auto: the golang image's GOTOOLCHAIN=local ignores go.mod's toolchain line", in[1])
				}
				return
			}
		}
	}
	t.Fatal("the Dockerfile runs no go command")
}
