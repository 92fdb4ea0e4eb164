// Package deploy_test checks the deployment files at the repository root and
// in deploy/ against the code: the Dockerfile builds the binaries exactly as
// build.sh and the README do, those binaries are static and work, the
// compose file validates, the example config loads, and the alert rules are
// well formed and name metrics, and label values, the service exports.
//
// External tools: docker-compose (Debian package docker-compose) and
// promtool (Debian package prometheus) are required under CI (CI set) and
// skipped without them otherwise.
package deploy_test

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"go.yaml.in/yaml/v3"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/worker"
)

// root is the repository root (tests run in deploy/).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// go build lines

// goBuild is one `[VAR=value ...] go build ...` command.
type goBuild struct {
	Env  []string // VAR=value words before "go"
	Args []string // from "go" on
}

func (g goBuild) String() string { return strings.Join(append(slices.Clone(g.Env), g.Args...), " ") }

// testRevision is what the builds here stamp for build.sh's ${REVISION}.
const testRevision = "0123456789abcdef0123456789abcdef01234567"

// command is the build, run at the repository root with out as its -o
// and ${REVISION} (build.sh's variable, the Dockerfile's argument) set to
// testRevision, without Go's VCS stamp, as in the image, whose build
// context has no .git.
func (g goBuild) command(ctx context.Context, t *testing.T, out string) *exec.Cmd {
	args := slices.Clone(g.Args)
	for i := range args {
		if args[i] == "-o" {
			args[i+1] = out
		}
		args[i] = strings.ReplaceAll(args[i], "${REVISION}", testRevision)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = root(t)
	cmd.Env = append(append(os.Environ(), g.Env...), "GOFLAGS=-buildvcs=false")
	return cmd
}

// Pkg is the package built: the last argument.
func (g goBuild) Pkg() string { return g.Args[len(g.Args)-1] }

// Out is the -o argument.
func (g goBuild) Out() string {
	for i, a := range g.Args {
		if a == "-o" && i+1 < len(g.Args) {
			return g.Args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "-o="); ok {
			return v
		}
	}
	return ""
}

// Reduced drops what a release build may add to the README's plain
// `go build -o <bin> <pkg>`: CGO_ENABLED=0, -trimpath and -ldflags, and
// names the output <bin>.
func (g goBuild) Reduced() string {
	var out []string
	for i := 0; i < len(g.Args); i++ {
		a := g.Args[i]
		switch {
		case a == "-trimpath" || strings.HasPrefix(a, "-ldflags="):
		case a == "-ldflags":
			i++
		case a == "-o":
			out = append(out, "-o", "<bin>")
			i++
		default:
			out = append(out, a)
		}
	}
	var env []string
	for _, e := range g.Env {
		if e != "CGO_ENABLED=0" {
			env = append(env, e)
		}
	}
	return strings.Join(append(env, out...), " ")
}

var envWord = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// goBuilds finds the go build commands of a shell script or Dockerfile
// text: continuation lines are joined, comments dropped, and each line is
// split into commands at && ; and |.
func goBuilds(t *testing.T, text string) []goBuild {
	t.Helper()
	text = strings.ReplaceAll(text, "\\\n", " ")
	text = strings.ReplaceAll(text, "`", " ") // Markdown code spans
	var found []goBuild
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || !strings.Contains(line, "go build") {
			continue
		}
		for _, cmd := range regexp.MustCompile(`&&|;|\|\|?`).Split(line, -1) {
			words, err := shellWords(cmd)
			if err != nil {
				t.Fatalf("%q: %v", cmd, err)
			}
			for i := 0; i+1 < len(words); i++ {
				if words[i] != "go" || words[i+1] != "build" {
					continue
				}
				g := goBuild{Args: words[i:]}
				for j := i - 1; j >= 0 && envWord.MatchString(words[j]); j-- {
					g.Env = append([]string{words[j]}, g.Env...)
				}
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// shellWords splits s like a POSIX shell does for plain words, single and
// double quotes and backslash escapes (no expansions).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf(`unterminated "`)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`CGO_ENABLED=0 go build -ldflags="-s -w" -o 'out dir/x' a\ b .`)
	want := []string{"CGO_ENABLED=0", "go", "build", "-ldflags=-s -w", "-o", "out dir/x", "a b", "."}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("shellWords = %q, %v; want %q", got, err, want)
	}
}

// byPkg indexes build commands by package, refusing two builds of one.
func byPkg(t *testing.T, file string, bs []goBuild) map[string]goBuild {
	t.Helper()
	m := map[string]goBuild{}
	for _, b := range bs {
		if _, dup := m[b.Pkg()]; dup {
			t.Errorf("%s builds %s twice", file, b.Pkg())
		}
		m[b.Pkg()] = b
	}
	return m
}

// The packages the image carries, built by both build.sh and the Dockerfile.
var imagePkgs = []string{".", "./cmd/combo-demo"}

// The contract's build command (CONTRACT.md §4), which the README repeats.
const contractBuild = "go build -o <bin> ."

func TestDockerfileBuildsLikeBuildSh(t *testing.T) {
	docker := byPkg(t, "Dockerfile", goBuilds(t, read(t, "Dockerfile")))
	script := byPkg(t, "build.sh", goBuilds(t, read(t, "build.sh")))
	for _, pkg := range imagePkgs {
		d, ok := docker[pkg]
		if !ok {
			t.Errorf("the Dockerfile does not build %s", pkg)
			continue
		}
		s, ok := script[pkg]
		if !ok {
			t.Errorf("build.sh does not build %s", pkg)
			continue
		}
		if d.String() != s.String() {
			t.Errorf("%s is built differently:\n  Dockerfile: %s\n  build.sh:   %s", pkg, d, s)
		}
		if !slices.Contains(d.Env, "CGO_ENABLED=0") {
			t.Errorf("Dockerfile: %s is not built with CGO_ENABLED=0 (a static binary for distroless/static): %s", pkg, d)
		}
	}
	if len(docker) != len(imagePkgs) || len(script) != len(imagePkgs) {
		t.Errorf("build.sh builds %v and the Dockerfile %v; want exactly %v",
			slices.Sorted(maps.Keys(script)), slices.Sorted(maps.Keys(docker)), imagePkgs)
	}
	if svc, ok := docker["."]; ok && svc.Reduced() != contractBuild {
		t.Errorf("the service build %q is not the README's %q plus CGO_ENABLED=0, -trimpath and -ldflags only", svc, contractBuild)
	}

	// The README's own command, when it shows one, is the same.
	if readme, err := os.ReadFile(filepath.Join(root(t), "README.md")); err == nil {
		n := 0
		for _, b := range goBuilds(t, string(readme)) {
			if b.Pkg() != "." {
				continue
			}
			n++
			if b.Reduced() != contractBuild {
				t.Errorf("README.md builds the service with %q; the Dockerfile and build.sh reduce to %q", b, contractBuild)
			}
		}
		if n == 0 {
			t.Logf("README.md shows no `go build ... .` line; compared with the contract's %q only", contractBuild)
		}
	}
}

// dockerfile is the Dockerfile's instructions, continuation lines joined.
func dockerfile(t *testing.T) [][2]string {
	t.Helper()
	var ins [][2]string
	for line := range strings.SplitSeq(strings.ReplaceAll(read(t, "Dockerfile"), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		ins = append(ins, [2]string{strings.ToUpper(op), strings.TrimSpace(rest)})
	}
	return ins
}

func TestDockerfileImage(t *testing.T) {
	ins := dockerfile(t)
	var froms []string
	final := map[string][]string{} // instructions of the final stage
	for _, in := range ins {
		if in[0] == "FROM" {
			froms = append(froms, in[1])
			final = map[string][]string{}
			continue
		}
		final[in[0]] = append(final[in[0]], in[1])
	}
	if len(froms) < 2 || !strings.HasPrefix(froms[0], "golang:1.26 ") {
		t.Errorf("want a multi-stage build from golang:1.26; FROM lines: %q", froms)
	}
	if last := froms[len(froms)-1]; !strings.Contains(last, "distroless/static") && !strings.HasPrefix(last, "alpine") {
		t.Errorf("final stage %q: want distroless/static or alpine", last)
	}
	if u := final["USER"]; len(u) != 1 || strings.HasPrefix(u[0], "root") || strings.HasPrefix(u[0], "0") {
		t.Errorf("final stage USER %q: want one non-root user", u)
	}
	if e := final["EXPOSE"]; len(e) != 1 || !slices.Equal(strings.Fields(e[0]), []string{"8888", "9100"}) {
		t.Errorf("EXPOSE %q: want 8888 9100", e)
	}
	// The binaries the final stage runs are the ones the builder makes.
	built := map[string]bool{}
	for _, b := range goBuilds(t, read(t, "Dockerfile")) {
		built[filepath.Base(b.Out())] = true
	}
	copies := strings.Join(final["COPY"], " ")
	if !strings.Contains(copies, "--from=build") {
		t.Errorf("the final stage copies nothing from the build stage: COPY %q", final["COPY"])
	}
	hc := final["HEALTHCHECK"]
	if len(hc) != 1 || !strings.Contains(hc[0], "CMD") {
		t.Fatalf("HEALTHCHECK %q: want one, with CMD", hc)
	}
	for _, ref := range []struct{ what, text string }{{"HEALTHCHECK", hc[0]}, {"ENTRYPOINT", strings.Join(final["ENTRYPOINT"], " ")}} {
		m := regexp.MustCompile(`"/usr/local/bin/([\w-]+)"`).FindStringSubmatch(ref.text)
		if m == nil || !built[m[1]] {
			t.Errorf("%s %q runs no binary the build stage builds (%v)", ref.what, ref.text, slices.Sorted(maps.Keys(built)))
		}
	}
}

// ---------------------------------------------------------------------------
// The binaries, built with build.sh's commands

// buildContext bounds one cold build (no -race, so nothing of the test
// run's build cache is reused) by the test binary's own deadline, less a
// minute to report it. A fixed bound was too short once other builds
// shared the 2 cores: a build killed after 5 minutes failed a suite that
// go test would still have let finish.
func buildContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), d.Add(-time.Minute))
	}
	return context.WithCancel(context.Background())
}

func TestBuiltBinariesAreStaticAndWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries and runs the service: skipped with -short")
	}
	dir := t.TempDir()
	bins := map[string]string{}
	for pkg, b := range byPkg(t, "build.sh", goBuilds(t, read(t, "build.sh"))) {
		out := filepath.Join(dir, filepath.Base(b.Out()))
		ctx, cancel := buildContext(t)
		cmd := b.command(ctx, t, out)
		if msg, err := cmd.CombinedOutput(); err != nil {
			cancel()
			t.Fatalf("%s: %v\n%s", b, err, msg)
		}
		cancel()
		assertStatic(t, out)
		bins[pkg] = out
	}
	svc, demo := bins["."], bins["./cmd/combo-demo"]
	if svc == "" || demo == "" {
		t.Fatalf("build.sh does not build all of %v", imagePkgs)
	}

	for _, bin := range []string{svc, demo} {
		out, err := bounded(t, bin, "-h").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage of") {
			t.Errorf("%s -h: %v\n%s", filepath.Base(bin), err, out)
		}
	}

	// A config file given without -conf is refused, not ignored for the
	// embedded Redis (bounded: a service that started would run on).
	argCtx, cancelArg := context.WithTimeout(context.Background(), 10*time.Second)
	arg := exec.CommandContext(argCtx, svc, "/etc/combo-service.yaml")
	arg.Env = append(os.Environ(), "COMBO_SERVER_ADDR=127.0.0.1:0", "COMBO_METRICS_ADDR=127.0.0.1:0")
	if out, err := arg.CombinedOutput(); !exitedWith(err, 2) || !strings.Contains(string(out), "-conf") {
		t.Errorf("combo-service /etc/combo-service.yaml: %v, want exit status 2 naming -conf\n%s", err, out)
	}
	cancelArg()

	// The service starts with no config file and the embedded Redis, the
	// probe sees it healthy and ready, the demo's checks pass against it,
	// and SIGTERM stops it with exit status 0.
	const w = time.Second
	s := startService(t, svc, "COMBO_WINDOW_SIZE="+w.String(), "COMBO_REDIS_ADRESS=x")
	if !slices.Contains(s.unknownEnv, "COMBO_REDIS_ADRESS") {
		t.Errorf("the start warned of %q as no configuration key, not of COMBO_REDIS_ADRESS", s.unknownEnv)
	}
	// The image has no VCS data: the stamped revision names the build, in
	// the start log and on /metrics (the rolling-upgrade notes go by commit).
	if s.revision != testRevision {
		t.Errorf("the start log names revision %q, want the stamped %q", s.revision, testRevision)
	}
	// Its value is 1 (README), for joins like "* on(instance) group_left(revision) combo_build_info".
	buildInfo := regexp.MustCompile(`(?m)^combo_build_info\{revision="` + regexp.QuoteMeta(testRevision) + `",version="[^"]*"\} 1$`)
	if body := get(t, "http://"+s.metrics+"/metrics"); !buildInfo.MatchString(body) {
		t.Errorf("/metrics has no combo_build_info of 1 naming revision %s", testRevision)
	}
	// The image's HEALTHCHECK: the binary probes its own configured metrics.addr.
	for _, path := range []string{"/healthz", "/readyz"} {
		probe := bounded(t, svc, "-healthcheck", path)
		probe.Env = append(os.Environ(), "COMBO_METRICS_ADDR=0.0.0.0:"+port(t, s.metrics))
		if out, err := probe.CombinedOutput(); err != nil {
			t.Errorf("combo-service -healthcheck %s: %v\n%s", path, err, out)
		}
	}
	closed := bounded(t, svc, "-healthcheck", "/healthz")
	closed.Env = append(os.Environ(), "COMBO_METRICS_ADDR="+testredis.ClosedAddr(t))
	if out, err := closed.CombinedOutput(); !exitedWith(err, 1) {
		t.Errorf("healthcheck of a closed port: %v, want exit status 1 (a HEALTHCHECK knows 0 and 1)\n%s", err, out)
	}
	exitCodes(t, svc)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := exec.CommandContext(ctx, demo, "-addr", s.rpc, "-redis", s.redis, "-window", w.String(), "-color", "never")
	out, err := d.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "conservation") || strings.Contains(string(out), "✗") {
		t.Errorf("combo-demo against the service: %v\n%s", err, out)
	} else {
		t.Logf("combo-demo:\n%s", out)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("combo-service after SIGTERM: %v (want exit status 0)", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("combo-service still running 30s after SIGTERM")
	}

	// A second signal during the drain ends the process at once: its held
	// windows stay pending in Redis for another replica or its next start.
	s = startService(t, svc, "COMBO_WINDOW_SIZE=30s", "COMBO_WINDOW_STALE=2m", "COMBO_SERVER_SHUTDOWN_TIMEOUT=1m")
	cli, err := client.NewClient([]string{s.rpc})
	if err != nil {
		t.Fatal(err)
	}
	gift := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, StarId: 7, ItemId: 1, ItemType: "rose", ItemName: "Rose",
		ItemIcon: "https://cdn.example.com/rose.png", Nickname: "n", AvatarUrl: "https://cdn.example.com/a.png",
		Quantity: 1, CreatedAt: time.Now().UnixMilli()}
	if _, err := cli.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift}); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.draining: // holding the window, due in about 30 s
	case <-time.After(30 * time.Second):
		t.Fatal("combo-service did not start draining within 30s of SIGTERM")
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
		if s.err == nil {
			t.Error("combo-service exited 0 after a second signal cut its drain short")
		}
	case <-time.After(10 * time.Second):
		t.Error("combo-service still draining 10s after a second signal")
	}
}

// nonLoopbackIPv4 is an IPv4 address of this host that is not loopback,
// or "" if it has none.
func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// exitCodes checks the exit status of -check-config and of a start that a
// configuration refuses: what scripts and orchestrators act on.
func exitCodes(t *testing.T, svc string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env := append(os.Environ(), "COMBO_CONFIG=", "COMBO_REDIS_ADDR=", "COMBO_REDIS_ADDRS=",
		"COMBO_SERVER_ADDR=127.0.0.1:0", "COMBO_METRICS_ADDR=127.0.0.1:0")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		out  string
	}{
		{"-check-config of a valid configuration", []string{"-check-config"}, nil, 0, "configuration ok"},
		{"-check-config of an invalid one", []string{"-check-config"}, []string{"COMBO_REDIS_SHARDS=0"}, 2, "redis.shards"},
		{"a start the configuration refuses", nil, []string{"COMBO_WINDOW_SIZE=1ms"}, 2, "window.size"},
		// A failed start is a failure (Restart=on-failure acts on it).
		{"a start on a port taken", nil, []string{"COMBO_SERVER_ADDR=" + taken.Addr().String()}, 1, "combo-service failed to start"},
	} {
		cmd := exec.CommandContext(ctx, svc, tc.args...)
		cmd.Env = append(slices.Clone(env), tc.env...)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.out) {
			t.Errorf("%s: exit status %d (%v), want %d, output naming %q:\n%s", tc.name, code, err, tc.code, tc.out, out)
		}
	}
}

// exitedWith reports whether err is a process's exit with status code.
func exitedWith(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}

// assertStatic fails unless path is an ELF executable with no interpreter
// and no shared libraries: it runs on distroless/static, which has no libc.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (program header %s)", filepath.Base(path), p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", filepath.Base(path), libs)
	}
}

type service struct {
	cmd                 *exec.Cmd
	rpc, metrics, redis string
	revision            string        // as its start log names it
	unknownEnv          []string      // the variables its start warned are no configuration key
	draining            chan struct{} // closed when it logs that its drain began
	done                chan struct{} // closed when the process has exited
	err                 error         // its Wait error, once done
}

// bounded is exec.Command of a built binary, killed after 30 s. A probe
// or a -h should answer at once; if main lost its branch for one, the
// binary would start serving and, unbounded, hang the package until go
// test's timeout, which names no test.
func bounded(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = time.Second
	return cmd
}

// startService runs the service binary on free ports with the embedded
// Redis and waits for its "started" log line.
func startService(t *testing.T, bin string, env ...string) *service {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "COMBO_SERVER_ADDR=127.0.0.1:0", "COMBO_METRICS_ADDR=127.0.0.1:0",
		"COMBO_REDIS_ADDR=", "COMBO_REDIS_ADDRS=", "COMBO_REDIS_EMBEDDED_ADDR=127.0.0.1:0", "COMBO_CONFIG=", "COMBO_LOG_FORMAT=json")
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &service{cmd: cmd, draining: make(chan struct{}), done: make(chan struct{})}
	started := make(chan struct{})
	var logged strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if logged.Len() < 64<<10 {
				logged.WriteString(line + "\n")
			}
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			if a, ok := m["embedded_redis_addr"].(string); ok {
				s.redis = a
			}
			if m["msg"] == "environment variable is no configuration key: ignored (misspelled?)" {
				name, _ := m["name"].(string)
				s.unknownEnv = append(s.unknownEnv, name) // before started: read after it
			}
			if m["msg"] == "combo-service started" {
				s.rpc, _ = m["rpc_addr"].(string)
				s.revision, _ = m["revision"].(string)
				s.metrics, _ = m["metrics_addr"].(string)
				close(started)
			}
			if m["msg"] == "rpc server stopped; publishing held windows" {
				close(s.draining)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	select {
	case <-started:
	case <-s.done:
		t.Fatalf("combo-service exited before starting: %v\n%s", s.err, logged.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("combo-service did not log \"combo-service started\" within 30s")
	}
	if s.rpc == "" || s.metrics == "" || s.redis == "" {
		t.Fatalf("started line without rpc_addr, metrics_addr or embedded_redis_addr: %+v", s)
	}
	return s
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The image's HEALTHCHECK asks whether the process is alive; it reads the
// configuration for metrics.addr only. A redis.tls_* file caught half
// rotated (README "TLS to Redis": the service goes on with the files last
// read whole) or a config edited since the start must not make a live
// replica unhealthy, and so killed by an orchestrator and then unable to
// start again.
func TestHealthcheckProbesOnlyMetricsAddr(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and runs it: skipped with -short")
	}
	b, ok := byPkg(t, "build.sh", goBuilds(t, read(t, "build.sh")))["."]
	if !ok {
		t.Fatal("build.sh does not build the service")
	}
	dir := t.TempDir()
	svc := filepath.Join(dir, "combo-service")
	ctx, cancel := buildContext(t)
	defer cancel()
	if msg, err := b.command(ctx, t, svc).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", b, err, msg)
	}
	s := startService(t, svc)

	halfRotated := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(halfRotated, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(edited, []byte("window:\n  size: 1ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Edited so that Load refuses it, not only Validate: a typo, a bare
	// duration. The probe reads metrics.addr alone, here from the file.
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("metrics:\n  addr: \"0.0.0.0:"+port(t, s.metrics)+"\"\nlog:\n  levle: debug\nwindow:\n  size: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string][]string{
		"half-rotated redis.tls_ca_file": {"COMBO_REDIS_ADDR=127.0.0.1:6379", "COMBO_REDIS_TLS=true", "COMBO_REDIS_TLS_CA_FILE=" + halfRotated,
			"COMBO_METRICS_ADDR=0.0.0.0:" + port(t, s.metrics)},
		"config edited to invalid":              {"COMBO_CONFIG=" + edited, "COMBO_METRICS_ADDR=0.0.0.0:" + port(t, s.metrics)},
		"config edited with a typo, addr in it": {"COMBO_CONFIG=" + typo},
	} {
		probe := bounded(t, svc, "-healthcheck", "/healthz")
		probe.Env = append(os.Environ(), env...)
		if out, err := probe.CombinedOutput(); err != nil {
			t.Errorf("%s: combo-service -healthcheck /healthz of a live service: %v\n%s", name, err, out)
		}
	}
	// A metrics.addr on a host that is not loopback is probed directly,
	// not through the HTTP_PROXY a container may have in its environment.
	if ip := nonLoopbackIPv4(t); ip != "" {
		onIP := startService(t, svc, "COMBO_METRICS_ADDR="+net.JoinHostPort(ip, "0"))
		probe := bounded(t, svc, "-healthcheck", "/healthz")
		probe.Env = append(os.Environ(), "COMBO_METRICS_ADDR="+onIP.metrics, "HTTP_PROXY=http://"+testredis.ClosedAddr(t), "NO_PROXY=")
		if out, err := probe.CombinedOutput(); err != nil {
			t.Errorf("healthcheck of %s with HTTP_PROXY set: %v\n%s", onIP.metrics, err, out)
		}
	}
	// metrics.addr is still read, and a port nothing listens on still fails.
	closed := bounded(t, svc, "-healthcheck", "/healthz")
	closed.Env = append(os.Environ(), "COMBO_CONFIG="+edited, "COMBO_METRICS_ADDR="+testredis.ClosedAddr(t))
	if out, err := closed.CombinedOutput(); err == nil {
		t.Errorf("healthcheck of a closed port succeeded:\n%s", out)
	}
}

// ---------------------------------------------------------------------------
// docker-compose.yml

// tool finds an external tool; under CI a missing required one fails.
func tool(t *testing.T, name, debianPackage string, requiredInCI bool) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if requiredInCI && os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed; CI must install it (Debian package %s)", name, debianPackage)
	}
	t.Skipf("%s is not installed", name)
	return ""
}

func TestComposeConfigValidates(t *testing.T) {
	dc := tool(t, "docker-compose", "docker-compose", true)
	cmd := exec.Command(dc, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = root(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck map[string]any `yaml:"healthcheck"`
		Volumes     []string       `yaml:"volumes"`
	} `yaml:"services"`
}

// The compose file's shape, read without docker-compose (YAML merge keys
// included), so it is checked everywhere.
func TestComposeTopology(t *testing.T) {
	var c composeFile
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.yml")), &c); err != nil {
		t.Fatal(err)
	}
	r, ok := c.Services["redis"]
	if !ok || !strings.HasPrefix(r.Image, "redis:7") {
		t.Fatalf("want a redis service on a redis:7 image, got %+v", r)
	}
	args := strings.Join(r.Command, " ")
	if !strings.Contains(args, "--appendonly yes") || !regexp.MustCompile(`--appendfsync (everysec|always)`).MatchString(args) {
		t.Errorf("redis must run with AOF on: command %q", args)
	}
	consumers := map[string]string{}
	for _, name := range []string{"replica-a", "replica-b"} {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		if s.Build == nil || s.Environment["COMBO_REDIS_ADDR"] != "redis:6379" {
			t.Errorf("%s: want build . and COMBO_REDIS_ADDR=redis:6379, got build %v env %v", name, s.Build, s.Environment)
		}
		consumer := s.Environment["COMBO_WORKER_CONSUMER"]
		if consumer == "" || consumers[consumer] != "" {
			t.Errorf("%s: COMBO_WORKER_CONSUMER %q must be set and distinct (%v)", name, consumer, consumers)
		}
		consumers[consumer] = name
		if s.DependsOn["redis"].Condition != "service_healthy" || s.Healthcheck["test"] == nil {
			t.Errorf("%s: want depends_on redis service_healthy and a healthcheck", name)
		}
		if cfg := s.Environment["COMBO_CONFIG"]; cfg != "" {
			mounted := false
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == cfg {
					mounted = true
					if _, err := os.Stat(filepath.Join(root(t), parts[0])); err != nil {
						t.Errorf("%s mounts %s, which is missing: %v", name, parts[0], err)
					}
				}
			}
			if !mounted {
				t.Errorf("%s: COMBO_CONFIG=%s but nothing is mounted there", name, cfg)
			}
		}
	}
	if consumers["replica-a"] == "" || consumers["replica-b"] == "" {
		t.Errorf("want consumers replica-a and replica-b, got %v", consumers)
	}
	d, ok := c.Services["demo"]
	if !ok || !slices.Equal(d.Entrypoint, []string{"/usr/local/bin/combo-demo"}) {
		t.Fatalf("want a demo service running /usr/local/bin/combo-demo, got %+v", d)
	}
	cmd := strings.Join(d.Command, " ")
	if !strings.Contains(cmd, "-addr replica-") || !strings.Contains(cmd, "-redis redis:6379") {
		t.Errorf("demo command %q: want -addr replica-…:8888 -redis redis:6379", cmd)
	}
	for _, dep := range []string{"redis", "replica-a"} {
		if d.DependsOn[dep].Condition != "service_healthy" {
			t.Errorf("demo: want depends_on %s service_healthy", dep)
		}
	}
}

// The redis service is healthy only once it answers PONG: redis-cli exits
// 0 on an error reply too, so a bare "redis-cli ping" passed while Redis
// was still loading its AOF ("LOADING ..."), and the replicas, which wait
// for it to be healthy, started against it. The check runs here as compose
// runs it, with a redis-cli that talks to a server answering LOADING to
// everything, then to a real redis-server.
func TestComposeRedisIsHealthyOnlyOnceItAnswersPong(t *testing.T) {
	var c composeFile
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.yml")), &c); err != nil {
		t.Fatal(err)
	}
	var test []string
	for _, w := range c.Services["redis"].Healthcheck["test"].([]any) {
		test = append(test, fmt.Sprint(w))
	}
	if len(test) < 2 || (test[0] != "CMD" && test[0] != "CMD-SHELL") {
		t.Fatalf("redis healthcheck test %q: want CMD or CMD-SHELL", test)
	}
	cli := tool(t, "redis-cli", "redis-tools", true)

	loading, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loading.Close() })
	go func() {
		for {
			conn, err := loading.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
					if _, err := io.WriteString(conn, "-LOADING Redis is loading the dataset in memory\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()

	run := func(addr string) error {
		host, port, _ := net.SplitHostPort(addr)
		bin := t.TempDir()
		wrapper := fmt.Sprintf("#!/bin/sh\nexec %s -h %s -p %s \"$@\"\n", cli, host, port)
		if err := os.WriteFile(filepath.Join(bin, "redis-cli"), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
		var cmd *exec.Cmd
		if test[0] == "CMD-SHELL" {
			cmd = exec.Command("sh", "-c", strings.Join(test[1:], " "))
		} else if test[1] == "redis-cli" {
			cmd = exec.Command(filepath.Join(bin, "redis-cli"), test[2:]...)
		} else {
			t.Fatalf("redis healthcheck %q runs no redis-cli", test)
		}
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := run(loading.Addr().String()); err == nil {
		t.Errorf("healthcheck %q passed against a Redis still loading", test)
	}
	if err := run(testredis.Start(t, testredis.Options{}).Addr); err != nil {
		t.Errorf("healthcheck %q failed against a live Redis: %v", test, err)
	}
}

// ---------------------------------------------------------------------------
// deploy/combo-service.example.yaml

func flatten(prefix string, m map[string]any, out map[string]bool) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			flatten(key, sub, out)
			continue
		}
		out[key] = true
	}
}

func TestExampleConfig(t *testing.T) {
	const path = "combo-service.example.yaml"
	// Environment wins over the file: keep this process's COMBO_* out.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COMBO_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	c, err := conf.Load(path)
	if err != nil {
		t.Fatalf("conf.Load(%s): %v", path, err)
	}
	if d := conf.Default(); c.Server != d.Server || c.Window != d.Window || c.Metrics != d.Metrics || c.Worker != d.Worker || c.Log != d.Log {
		t.Errorf("the example's server, metrics, window, worker and log sections should be the defaults:\n got %+v %+v %+v %+v %+v\nwant %+v %+v %+v %+v %+v",
			c.Server, c.Metrics, c.Window, c.Worker, c.Log, d.Server, d.Metrics, d.Window, d.Worker, d.Log)
	}
	// The redis section too, but for addr (the file says so; an alert's
	// description quotes stream_maxlen's default).
	got, want := c.Redis, conf.Default().Redis
	want.Addr = got.Addr
	for _, r := range []*conf.Redis{&got, &want} { // "[]" in the file, nil by default
		if len(r.Addrs) == 0 {
			r.Addrs = nil
		}
		if len(r.SentinelAddrs) == 0 {
			r.SentinelAddrs = nil
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the example's redis section, but for addr, should be the defaults:\n got %+v\nwant %+v", got, want)
	}

	// The derived defaults stay derived: a day-long window (with its stale
	// raised) must load with the example as it is.
	t.Setenv("COMBO_WINDOW_SIZE", "24h")
	t.Setenv("COMBO_WINDOW_STALE", "48h")
	if _, err := conf.Load(path); err != nil {
		t.Errorf("the example with a day-long window: %v", err)
	}

	var defaults map[string]any
	if err := mapstructure.Decode(conf.Default(), &defaults); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	flatten("", defaults, known)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	flatten("", file, listed)
	for k := range listed {
		if !known[k] {
			t.Errorf("%s sets %s, which the service does not know (viper would ignore it)", path, k)
		}
	}
	// Left out on purpose: a shared file must not pin one replica's name.
	omitted := map[string]bool{"worker.consumer": true}
	for k := range known {
		if !listed[k] && !omitted[k] {
			t.Errorf("%s does not document %s", path, k)
		}
	}
}

// ---------------------------------------------------------------------------
// deploy/alerts.yml

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exportedMetrics are the combo_* names the Go code registers: "combo_…"
// literals, and Name: "…" in files whose namespace is "combo".
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	literal := regexp.MustCompile(`"(combo_[a-z0-9_]+)"`)
	field := regexp.MustCompile(`\bName:\s*"([a-z0-9_]+)"`)
	err := filepath.WalkDir(root(t), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "kitex_gen" || d.Name() == ".git" || d.Name() == "output") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		if regexp.MustCompile(`namespace\s*=\s*"combo"`).Match(b) {
			for _, m := range field.FindAllSubmatch(b, -1) {
				names["combo_"+string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// exportedLabelValues are the label values metrics/metrics.go and
// internal/rpcserver/inflight.go export at 0 for each metric and label,
// read from their value lists (reportOutcomes and the like) and the
// constants they name. A matcher on any other value would select nothing,
// and its alert would never fire.
func exportedLabelValues(t *testing.T) map[string]map[string]bool {
	t.Helper()
	lists := map[string]string{ // list name: metric{label}
		"reportOutcomes":  "combo_reports_total{outcome}",
		"flushedStatuses": "combo_windows_flushed_total{status}",
		"redisOps":        "combo_redis_errors_total{op}",
		"loops":           "combo_loop_panics_total{loop}",
		"largeAdmissions": "combo_large_requests_total{admission}",
	}
	values := map[string]map[string]bool{}
	for _, file := range []string{filepath.Join("metrics", "metrics.go"), filepath.Join("internal", "rpcserver", "inflight.go")} {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root(t), file), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		readLists(t, f, lists, values)
	}
	for name, key := range lists {
		if len(values[key]) == 0 {
			t.Fatalf("no list %s of %s values", name, key)
		}
	}
	return values
}

// readLists adds to values the string lists of f named in lists, with the
// string constants of f they name.
func readLists(t *testing.T, f *ast.File, lists map[string]string, values map[string]map[string]bool) {
	t.Helper()
	consts := map[string]string{}
	str := func(e ast.Expr) (string, bool) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, err := strconv.Unquote(lit.Value)
			return s, err == nil
		}
		if id, ok := e.(*ast.Ident); ok {
			s, ok := consts[id.Name]
			return s, ok
		}
		return "", false
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if g.Tok == token.CONST {
					if s, ok := str(vs.Values[i]); ok {
						consts[name.Name] = s
					}
					continue
				}
				key, ok := lists[name.Name]
				cl, isList := vs.Values[i].(*ast.CompositeLit)
				if !ok || !isList {
					continue
				}
				values[key] = map[string]bool{}
				for _, e := range cl.Elts {
					s, ok := str(e)
					if !ok {
						t.Fatalf("%s: %s holds %T, not a string constant", f.Name.Name, name.Name, e)
					}
					values[key][s] = true
				}
			}
		}
	}
}

// TestHeldCapIsTheWorkers keeps the held-window cap that ComboStreamUnread's
// description and README name equal to the worker's: an operator reading
// "every replica holds its cap" checks combo_held_windows against it.
func TestHeldCapIsTheWorkers(t *testing.T) {
	capRef := regexp.MustCompile(`(?:cap of|at) ([0-9][0-9,]*)(?:,? a fixed cap| windows)`)
	want := strconv.Itoa(worker.DefaultMaxHeld)
	for _, file := range []string{"deploy/alerts.yml", "deploy/alerts_test.yml", "README.md"} {
		found := capRef.FindAllStringSubmatch(read(t, file), -1)
		if len(found) == 0 {
			t.Errorf("%s names no held-window cap (want %s)", file, want)
		}
		for _, m := range found {
			if strings.ReplaceAll(m[1], ",", "") != want {
				t.Errorf("%s: %q, but worker.DefaultMaxHeld is %s", file, m[0], want)
			}
		}
	}
}

func TestAlertRules(t *testing.T) {
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(read(t, "deploy/alerts.yml")))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("deploy/alerts.yml: %v", err)
	}
	exported := exportedMetrics(t)
	metricRef := regexp.MustCompile(`\bcombo_[a-z0-9_]+`)
	seen := map[string]bool{}
	covered := map[string]bool{}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, r)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want summary and description annotations", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			for _, m := range metricRef.FindAllString(r.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
						base = b
					}
				}
				covered[base] = true
				if !exported[base] {
					t.Errorf("%s uses %s, which the service does not export", r.Alert, m)
				}
			}
		}
	}
	for _, want := range []string{"combo_stream_length", "combo_stream_pending", "combo_push_lag_seconds",
		"combo_windows_flushed_total", "combo_redis_errors_total", "combo_reports_total"} {
		if !covered[want] {
			t.Errorf("no alert on %s", want)
		}
	}
	if !strings.Contains(read(t, "deploy/alerts.yml"), `status="stale"`) || !strings.Contains(read(t, "deploy/alerts.yml"), `outcome="unavailable"`) {
		t.Errorf("want alerts on stale drops and on reports answered unavailable")
	}
	if n == 0 {
		t.Fatal("no rules")
	}

	// Label values in matchers, in the rules and their annotations and in
	// the tests' input series, must be ones the service exports.
	labelValues := exportedLabelValues(t)
	selector := regexp.MustCompile(`\b(combo_[a-z0-9_]+)\{([^{}]*)\}`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
	for _, file := range []string{"deploy/alerts.yml", "deploy/alerts_test.yml"} {
		for _, sel := range selector.FindAllStringSubmatch(read(t, file), -1) {
			for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
				known := labelValues[sel[1]+"{"+m[1]+"}"]
				if known == nil {
					continue
				}
				for v := range strings.SplitSeq(m[2], "|") { // an =~ alternation
					if !known[v] {
						t.Errorf("%s: %s, which the service does not export (it has %s=%v)",
							file, sel[0], m[1], slices.Sorted(maps.Keys(known)))
					}
				}
			}
		}
	}

	promtool := tool(t, "promtool", "prometheus", true)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// alerts_logic_test.yml runs on the rules without their annotations.
	dir := t.TempDir()
	writeBareRules(t, filepath.Join(dir, "alerts_bare.yml"))
	if err := os.WriteFile(filepath.Join(dir, "alerts_logic_test.yml"), []byte(read(t, "deploy/alerts_logic_test.yml")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_logic_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules alerts_logic_test.yml: %v\n%s", err, out)
	}
}

// writeBareRules writes alerts.yml to path with every rule's annotations
// left out.
func writeBareRules(t *testing.T, path string) {
	t.Helper()
	var rules struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "deploy/alerts.yml")), &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			delete(r, "annotations")
		}
	}
	b, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// get is the body of a GET of url answered 200.
func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// ./build.sh --revision prints the revision build.sh stamps, which README,
// the Dockerfile and compose pass as the image's REVISION: one rule for
// both (untracked files make it +dirty, as the build context takes them),
// and it builds nothing.
func TestBuildShPrintsItsRevision(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(filepath.Join(dir, "build.sh"), []byte(read(t, "build.sh")), 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	git("add", "build.sh")
	git("commit", "-qm", "x")
	head := git("rev-parse", "HEAD")
	revision := func(env ...string) string {
		t.Helper()
		cmd := exec.Command("bash", "build.sh", "--revision")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build.sh --revision: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := revision("REVISION="); got != head {
		t.Errorf("clean checkout: %q, want %q", got, head)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := revision("REVISION="); got != head+"+dirty" {
		t.Errorf("with an untracked file: %q, want %q", got, head+"+dirty")
	}
	if got := revision("REVISION=abc"); got != "abc" {
		t.Errorf("REVISION set: %q, want it as given", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "output")); !os.IsNotExist(err) {
		t.Errorf("build.sh --revision built something: %v", err)
	}
}
