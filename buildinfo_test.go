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
		{"no VCS data and no stamp",
			debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"(devel)", "unknown"},
		{"no version at all",
			debug.BuildInfo{},
			"unknown", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := versionOf(&tc.bi, "")
			if v != tc.version || r != tc.revision {
				t.Errorf("versionOf = %q, %q; want %q, %q", v, r, tc.version, tc.revision)
			}
		})
	}
}

// The container image has no VCS data (.git is not in its build context):
// the revision stamped at link time names it. Go's own wins where both are,
// since it knows about uncommitted changes.
func TestVersionOfTakesTheStampedRevision(t *testing.T) {
	if _, r := versionOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "86e7787abcdef"); r != "86e7787abcdef" {
		t.Errorf("no VCS data, stamped: revision %q, want the stamp", r)
	}
	withVCS := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "86e7787abcdef"}, {Key: "vcs.modified", Value: "true"}}}
	if _, r := versionOf(withVCS, "0123456789abc"); r != "86e7787abcdef+dirty" {
		t.Errorf("VCS data and a stamp: revision %q, want Go's, with +dirty", r)
	}
}
