package node

import (
	"strings"

	"github.com/hashicorp/go-hclog"
)

// raftLogger passes Raft's log through, except the lines Raft repeats for
// as long as a follower is unreachable: an error per failed heartbeat or
// append (every few hundred milliseconds, at any level setting) and a
// warning per leader lease check. Those go to Debug; health.go says once
// when a member becomes unreachable, and once when it is back.
type raftLogger struct{ hclog.Logger }

// unreachableLines are the messages Raft repeats about an unreachable peer.
var unreachableLines = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to pipeline appendEntries",
	"failed to start pipeline replication to",
	"failed to contact",
}

func repeatsWhileUnreachable(msg string) bool {
	for _, l := range unreachableLines {
		if msg == l {
			return true
		}
	}
	return strings.HasPrefix(msg, "failed to contact ") && !strings.Contains(msg, "quorum")
}

func (l raftLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }
func (l raftLogger) Warn(msg string, args ...interface{})  { l.Log(hclog.Warn, msg, args...) }

func (l raftLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	if level >= hclog.Warn && repeatsWhileUnreachable(msg) {
		level = hclog.Debug
	}
	l.Logger.Log(level, msg, args...)
}

func (l raftLogger) Named(name string) hclog.Logger { return raftLogger{l.Logger.Named(name)} }
func (l raftLogger) ResetNamed(name string) hclog.Logger {
	return raftLogger{l.Logger.ResetNamed(name)}
}
func (l raftLogger) With(args ...interface{}) hclog.Logger {
	return raftLogger{l.Logger.With(args...)}
}
