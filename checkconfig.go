package main

import (
	"fmt"
	"io"

	"github.com/combo-service/combo-service/conf"
)

// embeddedWarning is the start's warning, and -check-config's, when no
// Redis is configured.
const embeddedWarning = "redis.addr is empty: running on an embedded in-memory Redis. NOTHING SURVIVES A RESTART. " +
	"Set redis.addr (COMBO_REDIS_ADDR) for production."

// checkConfig loads the configuration as a start would (the file at path,
// then the environment) and returns the exit status: 2 if a start would
// refuse it, its errors written to errOut; else 0, with the warnings a
// start logs and the environment variables it ignores written to out. It
// lets an operator try a new version's checks on the running version's
// configuration before a rolling upgrade replaces any replica (a later
// version may bound a setting an earlier one took), and a deploy check a
// change before it ships.
func checkConfig(path string, environ []string, out, errOut io.Writer) int {
	cfg, err := conf.Load(path)
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 2
	}
	for _, name := range conf.UnknownEnv(environ) {
		fmt.Fprintf(out, "warning: environment variable %s is no configuration key: a start ignores it (misspelled?)\n", name)
	}
	if cfg.Embedded() {
		fmt.Fprintln(out, "warning:", embeddedWarning)
	}
	for _, warning := range cfg.Warnings() {
		fmt.Fprintln(out, "warning:", warning)
	}
	fmt.Fprintln(out, "configuration ok")
	return 0
}
