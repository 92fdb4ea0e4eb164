package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -check-config answers what a start would: the same errors (exit 2,
// nothing on stdout), or "configuration ok" with the warnings a start logs
// and the environment variables it ignores (exit 0).
func TestCheckConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(file, []byte("worker:\n  read_count: 20000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		env        map[string]string
		status     int
		out, err   []string // each must appear
	}{
		{name: "defaults", status: 0, out: []string{"warning: " + embeddedWarning, "configuration ok"}},
		{
			name: "out of bounds in the environment", env: map[string]string{"COMBO_WORKER_BLOCK": "45s"},
			status: 2, err: []string{"worker.block", "45s"},
		},
		{
			name: "out of bounds in the file", path: file,
			status: 2, err: []string{"worker.read_count", "20000"},
		},
		{
			name: "a Redis Cluster, no redis.addr", env: map[string]string{"COMBO_REDIS_ADDRS": "r1:6379,r2:6379"},
			status: 0, out: []string{"configuration ok"},
		},
		{
			name: "Sentinels, no redis.addr", env: map[string]string{"COMBO_REDIS_SENTINEL_ADDRS": "s1:26379", "COMBO_REDIS_SENTINEL_MASTER": "m"},
			status: 0, out: []string{"configuration ok"},
		},
		{
			name:   "valid with a warning and a misspelled variable",
			env:    map[string]string{"COMBO_WINDOW_STALE": "4s", "COMBO_WINDOW_SIZ": "1s", "COMBO_REDIS_ADDR": "redis:6379"},
			status: 0,
			out:    []string{"warning: window.stale", "warning: environment variable COMBO_WINDOW_SIZ ", "configuration ok"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ := []string{"PATH=/bin"}
			for k, v := range tt.env {
				t.Setenv(k, v)
				environ = append(environ, k+"="+v)
			}
			var out, errOut strings.Builder
			status := checkConfig(tt.path, environ, &out, &errOut)
			if status != tt.status {
				t.Fatalf("status %d, want %d; stdout %q, stderr %q", status, tt.status, out.String(), errOut.String())
			}
			for _, s := range tt.out {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout %q lacks %q", out.String(), s)
				}
			}
			noRedis := tt.env["COMBO_REDIS_ADDR"] == "" && tt.env["COMBO_REDIS_ADDRS"] == "" && tt.env["COMBO_REDIS_SENTINEL_ADDRS"] == ""
			if embedded := strings.Contains(out.String(), embeddedWarning); embedded != (noRedis && tt.status == 0) {
				t.Errorf("stdout %q: embedded Redis warning %v, want it exactly when no Redis is set", out.String(), embedded)
			}
			for _, s := range tt.err {
				if !strings.Contains(errOut.String(), s) {
					t.Errorf("stderr %q lacks %q", errOut.String(), s)
				}
			}
			if tt.status != 0 && out.Len() != 0 {
				t.Errorf("stdout %q, want nothing for a configuration a start refuses", out.String())
			}
		})
	}
}
