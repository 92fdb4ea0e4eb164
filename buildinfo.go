package main

import "runtime/debug"

// buildVersion names the running build for the start log, so that an
// operator reading a replica's log can tell which code it runs: the main
// module's version (since Go 1.24, a pseudo-version carrying the commit when
// built in a git checkout; "(devel)" otherwise) and the VCS revision, with
// "+dirty" when the checkout had uncommitted changes. A build without VCS
// data (the container image: .git is not in its build context) takes the
// revision build.sh and the Dockerfile stamp into stampedRevision (from git,
// or REVISION); with neither it says "unknown". /metrics tells both as
// combo_build_info.
func buildVersion() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", orUnknown(stampedRevision)
	}
	return versionOf(bi, stampedRevision)
}

// stampedRevision is set at link time (-ldflags "-X
// main.stampedRevision=..."): build.sh sets it to $REVISION, else the
// checkout's commit; the Dockerfile to its REVISION build argument.
var stampedRevision string

func versionOf(bi *debug.BuildInfo, stamped string) (version, revision string) {
	version, revision = orUnknown(bi.Main.Version), orUnknown(stamped)
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value // Go's own, which knows "+dirty"
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision != "unknown" {
		revision += "+dirty"
	}
	return version, revision
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
