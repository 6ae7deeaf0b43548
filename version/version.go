// Package version names this build of rangealloc: its release, and the
// version of the protocol its nodes speak to each other.
package version

import (
	"runtime/debug"
)

// Version is the release, set at build time with
//
//	go build -ldflags "-X github.com/rangealloc/rangealloc/version.Version=v1.2.3"
//
// Empty: String derives one from the VCS stamp Go puts in the binary.
var Version = ""

// Protocol is the version of the node-to-node forwarding protocol this
// build speaks. Every forwarded call carries it; a node of the previous
// release sends none (0), which reads as 1.
//
//   - 1: the release before versions existed.
//   - 2: calls carry the protocol version; probes report the member's
//     release, feature level, disk space and health.
const Protocol = 2

// String returns the release: Version when set, else "devel+" and the
// short VCS revision (with "-dirty" for a modified tree), else "devel".
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel+" + rev
}
