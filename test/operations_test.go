package test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOperationsThatCannotSucceed: each answers at once with a definite
// error, or succeeds at once when there is nothing to do, and changes nothing.
func TestOperationsThatCannotSucceed(t *testing.T) {
	// Not parallel (docs/TESTING.md): it bounds the time the answers take (2 s).
	c := cluster.New(t, 1, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 10*time.Second)
	before, err := l.Node.Cluster()
	require.NoError(t, err)

	start := time.Now()
	err = l.Node.RemoveMember(ctx, l.ID, "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeLastVoter}, "removing the only voter")
	require.NoError(t, l.Node.TransferLeadership(ctx, l.ID), "a transfer to the leader itself is done")
	err = l.Node.TransferLeadership(ctx, "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeLastVoter}, "a transfer with no other voter")
	err = l.Node.TransferLeadership(ctx, "nope")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeMemberNotFound}, "a transfer to an unknown member")
	assert.Less(t, time.Since(start), 2*time.Second, "every answer is definite and immediate, not a retry until the deadline")

	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after), "membership unchanged")
	_, ok := l.Node.LocalState().Member(l.ID)
	assert.True(t, ok, "the member row is still there")
	assert.True(t, l.Node.IsLeader())
	_, err = l.Node.Allocate(ctx, "ip", "", "still-works", 0, "")
	require.NoError(t, err, "the cluster still commits")
}

// TestTransferToLeaderThroughFollower: a transfer to the current leader,
// asked on a follower, is done at once, and leadership stays where it was.
//
// An election the test does not cause (heartbeats late on a loaded
// machine) can move leadership while the call runs; then the call may even
// have reached a new leader and made a real transfer back. Such an attempt
// proves nothing, and the scenario runs again from a fresh look at the
// cluster, at most electionAttempts times: a transfer that moves
// leadership every time fails the test.
func TestTransferToLeaderThroughFollower(t *testing.T) {
	// Not parallel (docs/TESTING.md): it bounds the time the transfer takes (2 s).
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	waitPools(t, c)
	for attempt := 1; attempt <= electionAttempts; attempt++ {
		before := settledView(t, c)
		l := before.leader
		f := follower(c, l)
		start := time.Now()
		err := f.Node.TransferLeadership(ctxT(t, 10*time.Second), l.ID)
		took := time.Since(start)
		if moved := before.changed(viewRaft(c)); moved != "" {
			t.Logf("attempt %d: %s (the call returned %v after %v); running the scenario again", attempt, moved, err, took)
			continue
		}
		require.NoError(t, err)
		assert.Less(t, took, 2*time.Second)
		assert.True(t, l.Node.IsLeader(), "leadership stayed")
		return
	}
	t.Fatalf("in each of %d attempts a term moved or the leader changed while a transfer to the leader ran", electionAttempts)
}

// electionAttempts bounds how many times a test whose checks need
// leadership to stay put runs its scenario again after an election it did
// not cause.
const electionAttempts = 3

// raftView is what the live members say of Raft at about one moment:
// each one's term, and which one leads.
type raftView struct {
	leader *cluster.Member   // nil: none, or more than one
	terms  map[string]uint64 // by member ID
}

// viewRaft reads every live member's term, and whether it leads.
func viewRaft(c *cluster.Cluster) raftView {
	v := raftView{terms: map[string]uint64{}}
	leaders := 0
	for _, m := range c.Live() {
		term, leads := raftTerm(m)
		v.terms[m.ID] = term
		if leads {
			leaders++
			v.leader = m
		}
	}
	if leaders != 1 {
		v.leader = nil
	}
	return v
}

// settledView waits until exactly one live member leads and every live
// member is in its term, and returns that view.
func settledView(t *testing.T, c *cluster.Cluster) raftView {
	t.Helper()
	var v raftView
	require.Eventually(t, func() bool {
		v = viewRaft(c)
		if v.leader == nil {
			return false
		}
		for _, term := range v.terms {
			if term != v.terms[v.leader.ID] {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond, "no settled leader: one leader, every member in its term")
	return v
}

// changed says how later differs from v, or "" if every member is in the
// same term and the same member leads. A member cannot lead twice in one
// term (it must stand again, in a new term), and a member that does not
// lead cannot come to lead without its term moving: so an unchanged view
// means the leader led, and the others did not, all the time between.
func (v raftView) changed(later raftView) string {
	for id, term := range v.terms {
		if later.terms[id] != term {
			return fmt.Sprintf("the term of %s moved from %d to %d", id, term, later.terms[id])
		}
	}
	if later.leader != v.leader || v.leader == nil {
		return fmt.Sprintf("the leader changed from %s to %s", memberID(v.leader), memberID(later.leader))
	}
	return ""
}

func memberID(m *cluster.Member) string {
	if m == nil {
		return "none"
	}
	return m.ID
}

// raftTerm reads m's term and whether it leads in that term: the term is
// read on both sides of the state until the two reads agree.
func raftTerm(m *cluster.Member) (term uint64, leads bool) {
	read := func() uint64 {
		term, _ := strconv.ParseUint(m.Node.Stats()["term"], 10, 64)
		return term
	}
	for {
		term = read()
		leads = m.Node.IsLeader()
		if read() == term {
			return term, leads
		}
	}
}
