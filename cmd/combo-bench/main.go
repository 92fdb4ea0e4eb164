// Command combo-bench drives a running combo-service over its Kitex RPC and
// watches its pushes on Redis (PSUBSCRIBE act:*:contributions). It starts
// nothing itself. It measures throughput, RPC latency, push lag and
// conservation for single reports, batches, the batching client.Reporter
// and a fixed rate of new windows; runs the source design's 13-command write
// path (seeds/000 §4.2) against the same Redis for comparison; and measures
// Redis memory per open window and the cost per report as open windows
// grow. Given the service's pid and metrics address, it also reports each
// process's CPU per report and how the service's Redis pipelines were
// shared. Given a running combo-floor (-floor), compare mode ends with single
// reports against it: the RPC layer alone, for scale. Targets and figures:
// issue 4 and BENCHMARKS.md.
//
// Build it with go build ./cmd/combo-bench (./build.sh builds only the
// service and the demo), or run it with go run ./cmd/combo-bench. -redis
// must name the service's Redis: against the embedded one, the address
// the service logs as embedded_redis_addr.
//
//	combo-bench -addr 127.0.0.1:8888 -redis 127.0.0.1:6379 -mode compare -c 32 -d 10s
//	combo-bench -mode single -c 32 -service-pid PID -service-metrics 127.0.0.1:9100
//	combo-bench -mode rate -rate 2000 -d 10s -json
//	combo-bench -memory -windows 100000 -window 50s   # service with COMBO_WINDOW_SIZE=50s
//	combo-bench -curve -window 50s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

func main() { os.Exit(benchMain(os.Args[1:])) }

// benchMain returns the exit code, so deferred work (the profile) is done
// before the process exits.
func benchMain(args []string) int {
	// Kitex writes a warning per connection retry (up to 6 per call) while
	// the service restarts: thinned to a line a second, on stderr.
	klog.SetLogger(client.KitexLogger(zap.Must(zap.NewProduction())))
	cfg, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "combo-bench:", err)
		return 2
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "combo-bench:", err)
			return 1
		}
		defer stop()
	}
	err = run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "combo-bench:", err)
	}
	return exitCode(err)
}

// exitCode is the exit status of a run that ended with err.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNotConserved):
		return exitNotConserved
	}
	return 1
}

// exitNotConserved is the exit status of a run whose output was printed
// but whose pushes were not conserved (a window missing or pushed twice, a
// quantity off): a script or CI running the bench sees the failure without
// reading the output, and tells it from a bench that could not run (1) or
// was misused (2).
const exitNotConserved = 3

var errNotConserved = errors.New("not conserved")

// conserved returns errNotConserved naming how many of out's push checks
// failed, or nil.
func conserved(out printable) error {
	bad, all := 0, 0
	for _, pc := range out.checks() {
		all++
		if !pc.Conserved {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d runs' pushes (see conserved in the output)", errNotConserved, bad, all)
	}
	return nil
}

// bench is what every procedure drives and watches.
type bench struct {
	cfg config
	rdb *redis.Client
	col *collector
	cli comboservice.Client
	cpu *cpuSampler
	// floor and floorCPU drive and watch combo-floor (-floor).
	floor    comboservice.Client
	floorCPU *cpuSampler
}

func run(cfg config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(redisOptions(cfg.Redis, cfg.Concurrency))
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", cfg.Redis, err)
	}
	col, err := startCollector(ctx, rdb)
	if err != nil {
		return err
	}
	defer col.close()
	cli, err := newRPCClient(cfg.Addr, cfg.Concurrency)
	if err != nil {
		return err
	}
	redisPid := redisPID(ctx, rdb, cfg.RedisPID)
	b := &bench{cfg: cfg, rdb: rdb, col: col, cli: cli, cpu: newCPUSampler(cfg.ServicePID, redisPid)}
	if cfg.Floor != "" {
		if b.floor, err = newRPCClient(cfg.Floor, cfg.Concurrency); err != nil {
			return fmt.Errorf("-floor: %w", err)
		}
		b.floorCPU = newCPUSampler(cfg.FloorPID, redisPid)
	}

	var out printable
	switch {
	case cfg.Memory:
		out, err = b.memory()
	case cfg.Curve:
		out, err = b.curve()
	case cfg.Mode == "compare":
		out, err = b.compare()
	default:
		var r result
		r, err = b.run(cfg.Mode, cfg)
		out = runs{r}
	}
	if err != nil {
		return err
	}
	// A window pushed twice may be pushed again only once a claimer takes
	// it over, worker.claim_idle after its entry was read, long after its
	// run's check: keep listening, and check those runs again.
	time.Sleep(cfg.LateHorizon)
	amendLate(out, col)
	return printOut(os.Stdout, cfg.JSON, out)
}

// printOut prints out, as JSON if asJSON, then returns conserved(out): a
// run not conserved is printed whole first.
func printOut(w io.Writer, asJSON bool, out printable) error {
	if asJSON {
		if err := printJSON(w, out); err != nil {
			return err
		}
	} else {
		out.print(w)
	}
	return conserved(out)
}

// run is one load of mode with cfg, then its trailing pushes and checks.
func (b *bench) run(mode string, cfg config) (result, error) {
	wl := newWorkload()
	b.col.track(wl.activity)
	// naive and floor do not go through the service: no pipelines, no
	// pushes to check.
	viaService := mode != "naive" && mode != "floor"
	cpu := b.cpu
	if mode == "floor" {
		cpu = b.floorCPU
	}
	var pipesBefore pipelineCounts
	var pipesErr error
	if cfg.ServiceMetrics != "" && viaService {
		pipesBefore, pipesErr = scrapePipelines(context.Background(), cfg.ServiceMetrics)
	}
	cpu.reset()
	var l load
	var err error
	switch mode {
	case "single":
		l = runSingle(cfg, b.cli, wl)
	case "batch":
		l = runBatch(cfg, b.cli, wl)
	case "reporter":
		l, err = runReporter(cfg, b.cli, wl)
	case "rate":
		l = runRate(cfg, b.cli, wl)
	case "naive":
		l, err = runNaive(cfg, b.rdb, wl)
	case "floor":
		l = runSingle(cfg, b.floor, wl)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		b.col.take(wl.activity)
		return result{}, err
	}
	res := newResult(cfg, mode, l)
	res.CPU = cpu.since(l.rec.acked)
	if cfg.ServiceMetrics != "" && viaService {
		var after pipelineCounts
		if pipesErr == nil {
			after, pipesErr = scrapePipelines(context.Background(), cfg.ServiceMetrics)
		}
		if pipesErr != nil {
			res.Notes = append(res.Notes, pipesErr.Error())
		} else {
			res.Pipelines = after.since(pipesBefore, l.elapsed)
		}
	}
	if viaService {
		res.Pushes = awaitPushes(cfg, b.col, wl, l)
		// Its pushes' lag is measured until now: steal meanwhile slowed
		// them as much as the load.
		res.CPU.MachineStealShare = cpu.stealSinceReset()
	} else {
		b.col.take(wl.activity)
	}
	if err := b.col.problems(); err != nil {
		res.Notes = append(res.Notes, err.Error())
	}
	return res, nil
}

// compare runs the naive write path, then single reports, batches of 50 and
// the Reporter, at the same concurrency and duration, back to back, so the
// ratios come from one run on one machine state. With -floor it ends with
// single reports against combo-floor.
func (b *bench) compare() (printable, error) {
	var out comparison
	modes := []string{"naive", "single", "batch", "reporter"}
	if b.floor != nil {
		modes = append(modes, "floor")
	}
	for _, mode := range modes {
		cfg := b.cfg
		if mode == "batch" || mode == "reporter" {
			cfg.Batch = 50
		}
		r, err := b.run(mode, cfg)
		if err != nil {
			return nil, fmt.Errorf("compare, %s: %w", mode, err)
		}
		out.Runs = append(out.Runs, r)
	}
	naive := out.Runs[0].Throughput
	if naive > 0 {
		out.Ratios = map[string]float64{
			"single_vs_naive":   out.Runs[1].Throughput / naive,
			"batch50_vs_naive":  out.Runs[2].Throughput / naive,
			"reporter_vs_naive": out.Runs[3].Throughput / naive,
		}
		if b.floor != nil {
			out.Ratios["floor_vs_naive"] = out.Runs[4].Throughput / naive
		}
	}
	if b.floor != nil && out.Runs[4].Throughput > 0 {
		// How much of what the RPC layer allows the service's single
		// reports reach.
		out.Ratios["single_vs_floor"] = out.Runs[1].Throughput / out.Runs[4].Throughput
	}
	return out, nil
}

// redisOptions are the bench's Redis client's, for naive mode's callers
// and the subscriber.
func redisOptions(addr string, concurrency int) *redis.Options {
	return &redis.Options{
		Addr: addr,
		// Room for each of naive mode's callers to have a command in
		// flight at once (go-redis's default, 10 per core, would throttle
		// naive at C=32), and a few for the bench's own.
		PoolSize: concurrency + 8,
		// No CLIENT SETINFO or CLIENT MAINT_NOTIFICATIONS on connect,
		// which go-redis sends by default and a Redis without them refuses
		// (7.0 both; each a line in INFO errorstats), as the service's own
		// clients send neither.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}
