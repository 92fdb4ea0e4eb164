package main

import "runtime/debug"

// buildVersion names the running build for the start log, so that an
// operator reading a replica's log can tell which code it runs: the main
// module's version (since Go 1.24, a pseudo-version carrying the commit when
// built in a git checkout; "(devel)" otherwise) and the VCS revision, with
// "+dirty" when the checkout had uncommitted changes. A build without VCS
// data (the container image: .git is not in its build context) has no
// revision; it says "unknown". /metrics tells the same version as
// go_build_info (client_golang's build-info collector).
func buildVersion() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", "unknown"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) (version, revision string) {
	version, revision = bi.Main.Version, "unknown"
	if version == "" {
		version = "unknown"
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision != "unknown" {
		revision += "+dirty"
	}
	return version, revision
}
