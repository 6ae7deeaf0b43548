package node

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
)

// TestRaftLoggerQuietsUnreachablePeers: at warn level, the lines Raft
// repeats per failed heartbeat are gone; other errors stay, through
// Named and With too.
func TestRaftLoggerQuietsUnreachablePeers(t *testing.T) {
	var out bytes.Buffer
	l := raftLogger{hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn})}.Named("raft").With("k", "v")
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:1", "error", "connection refused")
	l.Error("failed to appendEntries to", "peer", "n2")
	l.Warn("failed to contact", "server-id", "n2", "time", "2s")
	l.Error("failed to commit logs", "error", "disk")
	l.Warn("failed to contact quorum of nodes, stepping down")
	assert.NotContains(t, out.String(), "heartbeat")
	assert.NotContains(t, out.String(), "appendEntries")
	assert.NotContains(t, out.String(), "server-id")
	assert.Contains(t, out.String(), "failed to commit logs")
	assert.Contains(t, out.String(), "stepping down")
}
