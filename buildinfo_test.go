package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionOfNamesTheBuild(t *testing.T) {
	for _, tc := range []struct {
		name              string
		bi                debug.BuildInfo
		version, revision string
	}{
		{"a clean checkout",
			debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204180000-86e7787abcde"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "86e7787abcdef"}, {Key: "vcs.modified", Value: "false"}}},
			"v0.0.0-20261204180000-86e7787abcde", "86e7787abcdef"},
		{"uncommitted changes",
			debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204180000-86e7787abcde+dirty"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "86e7787abcdef"}, {Key: "vcs.modified", Value: "true"}}},
			"v0.0.0-20261204180000-86e7787abcde+dirty", "86e7787abcdef+dirty"},
		{"no VCS data (the container image)",
			debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"(devel)", "unknown"},
		{"no version at all",
			debug.BuildInfo{},
			"unknown", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := versionOf(&tc.bi)
			if v != tc.version || r != tc.revision {
				t.Errorf("versionOf = %q, %q; want %q, %q", v, r, tc.version, tc.revision)
			}
		})
	}
}
