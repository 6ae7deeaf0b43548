package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
)

// mistaken-join starts a fourth, bare server in a namespace of its own:
// it bootstraps a one-node cluster with the default pools. Once it
// serves, the harness asks a member of the real cluster to add it, as an
// operator who typed the wrong address would. The cluster must ask the
// newcomer first and refuse it: 409 NodeNotEmpty with the newcomer's
// clusterId and lastIndex, membership unchanged. Then the fourth node is
// stopped and its data dir removed; if the join was accepted, the harness
// removes the member again, so that the run goes on with three.

// spareWithin bounds the wait for the fourth node to serve, and the
// harness's removal of a fourth member that the cluster accepted.
const spareWithin = 20 * time.Second

// JoinAttempt is what became of one mistaken join.
type JoinAttempt struct {
	At  int64  // the request, on the run's clock
	Via string // the member asked
	// Status, Code and Details are the answer's: 200 with an empty Code
	// when the member was added.
	Status  int
	Code    string
	Details map[string]any
	// Err is set when the attempt could not be made, or had no answer.
	Err           string
	Before, After []api.ClusterMember // the leader's configuration around the request
	Cleanup       string              // what the harness did to restore the membership, if anything
}

// mistakenJoin carries out a mistaken-join step.
func (n *Nemesis) mistakenJoin(ctx context.Context, s Step, leader int, term uint64) error {
	sp, err := n.C.Spare()
	if err != nil {
		return err
	}
	defer func() {
		_ = sp.Kill()
		_ = os.RemoveAll(sp.DataDir)
	}()
	via, role := leader, "leader"
	if !s.OnLeader {
		via, role = n.others(leader)[s.Pick%2], "follower"
	}
	j := JoinAttempt{Via: n.C.Servers[via].ID, At: n.Now()}
	defer func() {
		n.mu.Lock()
		n.joins = append(n.joins, j)
		n.mu.Unlock()
	}()
	if err := n.startSpare(ctx, sp); err != nil {
		j.Err = fmt.Sprintf("the fourth node did not come up: %v (log in %s)", err, sp.LogPath)
		n.Logf("skip %s: %s", s.Fault, j.Err)
		return nil
	}
	if j.Before, err = n.C.Members(ctx, leader); err != nil {
		j.Err = fmt.Sprintf("the configuration before: %v", err)
		n.Logf("skip %s: %s", s.Fault, j.Err)
		return nil
	}
	j.At = n.Now()
	w := Window{Fault: s.Fault, Start: j.At, Detail: fmt.Sprintf("ask %s %s (leader %s, term %d) to add %s, a one-node cluster of its own at %s",
		role, j.Via, n.C.Servers[leader].ID, term, sp.ID, sp.Raft)}
	n.mark("fault %s: %s", s.Fault, w.Detail)
	_, err = n.C.admin[via].AddMember(ctx, api.MemberRequest{ID: sp.ID, RaftAddr: sp.Raft, APIAddr: sp.API})
	var ce *client.Error
	switch {
	case err == nil:
		j.Status = 200
	case errors.As(err, &ce):
		j.Status, j.Code, j.Details = ce.Status, ce.Code, ce.Details
	default:
		j.Err = err.Error()
	}
	n.mark("%s answered %s", j.Via, j.answer())
	sleep(ctx, s.Hold)
	j.After = n.membersNow(ctx)
	_ = sp.Kill()
	if slices.ContainsFunc(j.After, func(m api.ClusterMember) bool { return m.ID == sp.ID }) {
		j.Cleanup = n.removeSpare(ctx, sp.ID)
		n.mark("%s", j.Cleanup)
	}
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.mu.Unlock()
	n.mark("heal %s", s.Fault)
	return nil
}

// startSpare starts the fourth node on an empty data dir and waits until
// it leads its own cluster and serves its default pools.
func (n *Nemesis) startSpare(ctx context.Context, sp *Server) error {
	if err := os.RemoveAll(sp.DataDir); err != nil {
		return err
	}
	if err := sp.Start(); err != nil {
		return err
	}
	c := n.C.Sec.Client(sp.API, time.Second, n.C.Sec.Admin)
	ctx, cancel := context.WithTimeout(ctx, spareWithin)
	defer cancel()
	return poll(ctx, 200*time.Millisecond, sp.ID+" serves its own cluster", func() (bool, string) {
		st, err := c.Cluster(ctx)
		if err != nil {
			return false, err.Error()
		}
		if st.Leader.ID != sp.ID {
			return false, fmt.Sprintf("leader %q", st.Leader.ID)
		}
		_, err = c.Pool(ctx, "clusterip-ipv4", client.Options{})
		return err == nil, fmt.Sprint(err)
	})
}

// membersNow returns the configuration the current leader reports, or
// nil.
func (n *Nemesis) membersNow(ctx context.Context) []api.ClusterMember {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ms []api.ClusterMember
	_ = poll(actx, 200*time.Millisecond, "the configuration", func() (bool, string) {
		l, _ := n.C.Leader(actx)
		if l < 0 {
			return false, "no leader"
		}
		var err error
		ms, err = n.C.Members(actx, l)
		return err == nil, fmt.Sprint(err)
	})
	return ms
}

// removeSpare removes the member id that a mistaken join added, through
// whichever node leads, and says what it did.
func (n *Nemesis) removeSpare(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, spareWithin)
	defer cancel()
	err := poll(ctx, 200*time.Millisecond, "remove "+id, func() (bool, string) {
		l, _ := n.C.Leader(ctx)
		if l < 0 {
			return false, "no leader"
		}
		err := n.C.admin[l].RemoveMember(ctx, id)
		var ce *client.Error
		return err == nil || errors.As(err, &ce) && ce.Code == "MemberNotFound", fmt.Sprint(err)
	})
	if err != nil {
		return fmt.Sprintf("could not remove the member %s the mistaken join added: %v", id, err)
	}
	return fmt.Sprintf("removed the member %s the mistaken join added", id)
}

// problems returns what is wrong with the attempt: anything but 409
// NodeNotEmpty with the newcomer's clusterId and lastIndex, and an
// unchanged configuration.
func (j JoinAttempt) problems() []string {
	at := fmt.Sprintf("join of the fourth node via %s at %.3fs", j.Via, float64(j.At)/1e9)
	if j.Err != "" {
		return []string{fmt.Sprintf("%s: %s", at, j.Err)}
	}
	var out []string
	switch {
	case j.Status != 409 || j.Code != "NodeNotEmpty":
		out = append(out, fmt.Sprintf("%s: answered %s, want 409 NodeNotEmpty", at, j.answer()))
	default:
		id, _ := j.Details["clusterId"].(string)
		last, _ := j.Details["lastIndex"].(float64)
		if id == "" || last <= 0 {
			out = append(out, fmt.Sprintf("%s: 409 NodeNotEmpty with details %v, want the newcomer's clusterId and lastIndex", at, j.Details))
		}
	}
	if !slices.EqualFunc(j.Before, j.After, sameMember) {
		out = append(out, fmt.Sprintf("%s: membership changed from %s to %s", at, memberList(j.Before), memberList(j.After)))
	}
	if strings.HasPrefix(j.Cleanup, "could not") {
		out = append(out, at+": "+j.Cleanup)
	}
	return out
}

// answer shows the answer to the join.
func (j JoinAttempt) answer() string {
	switch {
	case j.Err != "":
		return "nothing: " + j.Err
	case j.Status == 200:
		return "200 (added)"
	case j.Details != nil:
		return fmt.Sprintf("%d %s %v", j.Status, j.Code, j.Details)
	}
	return fmt.Sprintf("%d %s", j.Status, j.Code)
}

// memberList shows a configuration as "n1 (voter), n2 (nonvoter)".
// sameMember compares what makes a member: its ID, addresses and vote,
// not its health, which moves from one reading to the next.
func sameMember(a, b api.ClusterMember) bool {
	return a.ID == b.ID && a.RaftAddr == b.RaftAddr && a.APIAddr == b.APIAddr && a.Voter == b.Voter
}

func memberList(ms []api.ClusterMember) string {
	if ms == nil {
		return "(unknown)"
	}
	var out []string
	for _, m := range ms {
		kind := "voter"
		if !m.Voter {
			kind = "nonvoter"
		}
		out = append(out, fmt.Sprintf("%s %s (%s)", m.ID, m.RaftAddr, kind))
	}
	return "[" + strings.Join(out, ", ") + "]"
}
