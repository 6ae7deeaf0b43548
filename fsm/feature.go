package fsm

import "fmt"

// Feature levels let nodes of two releases run one cluster during a
// rolling upgrade. A release supports every level up to its
// MaxFeatureLevel. The cluster's level is replicated state: a leader
// proposes an entry kind, and every node writes a snapshot format, only
// if the cluster's level has it, and the level is raised (by a
// KindSetFeatureLevel entry) only once every member's binary supports the
// new one. So no node ever receives an entry or a snapshot it cannot read.
//
//   - Level 1: the release before levels existed: kinds 0 to 12, snapshot
//     format 3. A state that never recorded a level is at level 1.
//   - Level 2: KindSetFeatureLevel itself; KindSetMemberNonvoter; snapshot
//     format 4, which records the level and the members kept non-voters.
//   - Level 3: the request table counts keyed requests and the ones whose
//     ID a node drew apart (requests.go), so writes without a key never
//     evict a keyed request's result. No new kind or format: what changes
//     is which results every replica remembers, so all must change at one
//     log index.
//   - Level 4: rules of the Services' state machine, bounded results, and
//     the request table's byte bound by class; no new kind or format.
//   - Level 5: KindPutServiceV2, a Service write that carries the
//     singular clusterIP its caller gave, so that an update naming only
//     the stored primary keeps a dual-stack Service's secondary, as
//     kube-apiserver does. Below it, proposers fold the singular into
//     clusterIPs themselves, which refuses that update (422).
//
// What Apply does at each level, and did before it, is written in one
// place: the rules of rules.go, which the state resolves from its level
// when the level changes.
//
// A new kind or format bumps MaxFeatureLevel and names its level in
// kindLevels (or in the snapshot package's choice of format); so does a
// new rule of Apply, a field of rules that rulesFor sets from its level.
const MaxFeatureLevel = 5

// kindLevels is the feature level that introduced each kind; kinds not
// listed are level 1.
var kindLevels = map[Kind]int{
	KindSetFeatureLevel:   levelRaise,
	KindSetMemberNonvoter: levelRaise,
	KindPutServiceV2:      levelPutServiceV2,
}

// KindLevel returns the feature level a cluster must have before a leader
// proposes an entry of kind k. KindSetFeatureLevel is the raise itself: its
// proposer checks the members instead (see node.RaiseFeatureLevel).
func KindLevel(k Kind) int {
	if l, ok := kindLevels[k]; ok {
		return l
	}
	return 1
}

// level is the state's feature level: 1 when none was recorded.
func (s *state) level() int {
	return max(1, int(s.featureLevel))
}

// setFeatureLevel raises the cluster's feature level. It never lowers it:
// a node of an older release may no longer read what was written since,
// so a lower level would promise what it cannot keep. A level above this
// build's never reaches here: DecodeEntry refuses it, and the node stops
// rather than apply what it does not know.
func (s *state) setFeatureLevel(level uint64) *Result {
	switch {
	case level < 1:
		return &Result{Err: errorf(CodeInvalidArgument, "feature level %d: levels start at 1", level)}
	case int(level) < s.level():
		return &Result{Err: errorf(CodeInvalidArgument, "feature level %d is below the cluster's, %d: a level is never lowered", level, s.level())}
	case int(level) == s.level():
		return &Result{}
	}
	s.setLevel(level)
	return &Result{Created: true}
}

// FeatureLevel returns the cluster's feature level, 1 until one was raised.
func (f *FSM) FeatureLevel() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.level()
}

// errLevelTooHigh explains an entry or snapshot of a level this build does not have.
func errLevelTooHigh(level uint64) error {
	return fmt.Errorf("feature level %d is above this build's %d: this node runs an older release than the cluster; upgrade its binary",
		level, MaxFeatureLevel)
}
