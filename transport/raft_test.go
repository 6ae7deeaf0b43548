package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertNotCommitted checks that an Apply failed as it must on a leader
// that cannot reach a quorum.
func assertNotCommitted(t *testing.T, err error) {
	t.Helper()
	assert.True(t, errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout),
		"Apply on a leader cut off from its quorum = %v, want ErrLeadershipLost, ErrNotLeader or ErrEnqueueTimeout", err)
}

func TestClusterReplicates(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	c.apply(l, cmds("x", 10)...)
	c.ensureSame()
	for _, nd := range c.nodes {
		assert.Equal(t, cmds("x", 10), nd.fsm.Applied(), "FSM of %s", nd.id)
	}
}

// TestClusterIsolatedLeader: a leader cut off while it replicates over
// pipelines commits nothing; the majority elects another and goes on; after
// the heal every replica agrees and the old leader's write is gone.
func TestClusterIsolatedLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	c.apply(l, cmds("before", 10)...)
	require.Eventually(t, func() bool {
		c.apply(l, "warm")
		return l.trans.pipelined.Load() > 0
	}, 5*time.Second, 10*time.Millisecond, "the leader replicates over pipelines")

	c.faults.Isolate(l.addr, c.addrs())
	err := l.raft.Apply([]byte("lost"), time.Second).Error()
	assertNotCommitted(t, err)

	nl := c.leader(c.others(l)...)
	c.apply(nl, "after")
	assert.NotEqual(t, raft.Leader, l.raft.State(), "the isolated leader stepped down")

	c.faults.Heal()
	c.ensureSame()
	for _, nd := range c.nodes {
		assert.NotContains(t, nd.fsm.Applied(), "lost", "FSM of %s", nd.id)
		assert.Contains(t, nd.fsm.Applied(), "after", "FSM of %s", nd.id)
	}
}

// TestClusterOneWayCut: a cut loses one direction only.
func TestClusterOneWayCut(t *testing.T) {
	tests := []struct {
		name  string
		cut   func(c *testCluster, l *testNode, fs []*testNode)
		check func(t *testing.T, c *testCluster, l *testNode, fs []*testNode)
	}{
		{
			name: "leader to follower: the leader commits with the other follower, the cut one lags",
			cut:  func(c *testCluster, l *testNode, fs []*testNode) { c.faults.Cut(l.addr, fs[0].addr) },
			check: func(t *testing.T, c *testCluster, l *testNode, fs []*testNode) {
				behind := fs[0].raft.AppliedIndex()
				c.apply(l, cmds("one-way", 5)...)
				require.Eventually(t, func() bool { return fs[1].raft.AppliedIndex() == l.raft.AppliedIndex() },
					2*time.Second, 10*time.Millisecond, "the follower still reached gets every entry")
				assert.Equal(t, raft.Leader, l.raft.State(), "the cut follower's pre-votes do not unseat the leader")
				assert.LessOrEqual(t, fs[0].raft.LastIndex(), behind, "the cut follower receives nothing")
			},
		},
		{
			name: "followers to leader: requests arrive, responses are lost, the leader cannot commit",
			cut: func(c *testCluster, l *testNode, fs []*testNode) {
				c.faults.Cut(fs[0].addr, l.addr)
				c.faults.Cut(fs[1].addr, l.addr)
			},
			check: func(t *testing.T, c *testCluster, l *testNode, fs []*testNode) {
				fut := l.raft.Apply([]byte("unacknowledged"), time.Second)
				assertNotCommitted(t, fut.Error())
				if idx := fut.Index(); idx > 0 {
					for _, f := range fs {
						assert.GreaterOrEqual(t, f.raft.LastIndex(), idx, "the request reached %s", f.id)
					}
				}
				nl := c.leader(fs...)
				c.apply(nl, "new leader")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCluster(t, 3)
			l := c.leader()
			c.apply(l, cmds("before", 5)...)
			c.ensureSame()
			fs := c.others(l)
			tt.cut(c, l, fs)
			tt.check(t, c, l, fs)
			c.faults.Heal()
			c.ensureSame()
		})
	}
}
