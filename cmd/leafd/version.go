package main

import (
	"runtime/debug"
	"strings"
)

// version is stamped at build time with -ldflags "-X main.version=vX.Y.Z" (make build,
// make release, scripts/image.sh, the Dockerfiles' VERSION argument, bench/). Unstamped
// (go install ...@vX, go build in a clone) leafdVersion reads Go's build info instead.
// `leafd version` prints it, INFO server shows it as leafd_version, /status and /status.json
// as version.
var version string

// leafdVersion is the stamped version, else the one Go's build info gives.
func leafdVersion() string {
	if version != "" {
		return version
	}
	info, _ := debug.ReadBuildInfo()
	return buildInfoVersion(info)
}

// buildInfoVersion is the module version of a `go install module@version` build, else the
// VCS revision of a build in a clone (12 hex digits, "+dirty" with uncommitted changes), else
// "unknown" (a build with neither, such as a test binary).
func buildInfoVersion(info *debug.BuildInfo) string {
	if info == nil {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if v := info.Main.Version; v != "" && v != "(devel)" && (rev == "" || !strings.HasPrefix(v, "v0.0.0-")) {
		return v // a tagged module version (go install ...@v0.1.0), or one Go derived from a tag
	}
	if rev == "" {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return rev
}
