package fsm

// The feature levels that changed what Apply does (feature.go tells how a
// level is raised; kindLevels which kinds each brought).
const (
	// levelRaise brought KindSetFeatureLevel, KindSetMemberNonvoter and
	// snapshot format 4.
	levelRaise = 2
	// levelRequestClasses brought the request table's classes.
	levelRequestClasses = 3
	// levelServiceRules brought the rules of the Services' state machine,
	// bounded results and the byte bound by class; no kind, no format.
	levelServiceRules = 4
	// levelPutServiceV2 brought KindPutServiceV2.
	levelPutServiceV2 = 5
)

// LevelBoundedResults is the level from which Apply refuses a transaction
// whose answer is too large to remember (rules.boundedResults): proposers
// refuse what could be too large below it (node.checkResultSize).
const LevelBoundedResults = levelServiceRules

// rules are what Apply does that changed with a feature level, resolved
// once from the cluster's level (rulesFor). Each is true from the level
// that brought it; below it every replica keeps the old behaviour, written
// here beside it, so that a log written before the raise replays as it was
// applied. The state keeps its rules (state.rules) and resolves them again
// only where its level changes: the raise (setFeatureLevel) and a
// snapshot's import. Apply and its helpers read them; none compares
// levels.
type rules struct {
	// Level 2 (levelRaise).

	// nonvoterMembers: KindSetMemberNonvoter is applied. Before: refused
	// (InvalidArgument), since a member kept a non-voter needs snapshot
	// format 4. Leaders never proposed it there, so no log holds one.
	nonvoterMembers bool

	// Level 3 (levelRequestClasses).

	// requestClasses: the request table counts keyed requests and those
	// whose ID a node drew apart, RequestTableSize each (requests.go).
	// Before: one count over both, so writes without a key evicted keyed
	// results.
	requestClasses bool

	// Level 4 (levelServiceRules).

	// networkPoolsKept: a pool the service network names cannot be deleted
	// (PoolNotEmpty). Before: an empty one could be, which left the
	// network naming a pool that was gone.
	networkPoolsKept bool
	// releaseWithoutNetwork: deleting a Service releases its values from
	// the network's pools that exist. Before: it released none unless
	// every pool of the network existed.
	releaseWithoutNetwork bool
	// repairByOffset: a repair keeps a leaked value that a kept record
	// names in another spelling ("fd00::00a" for "fd00::a"): values are
	// compared by offset. Before: as strings, so that value was freed.
	repairByOffset bool
	// healthCheckInvalid: a requested healthCheckNodePort that cannot be
	// reserved is 422 Invalid. Before: 400 InvalidArgument.
	healthCheckInvalid bool
	// boundedResults: a transaction whose answer encodes to more than the
	// MaxRememberedResult a snapshot keeps is undone and refused. Before:
	// it was applied, and no snapshot could be written until its result
	// left the request table (proposers refused what could reach the
	// bound instead).
	boundedResults bool
	// bytesByClass: the request table bounds the bytes of keyed and drawn
	// requests apart, RequestTableBytes and DrawnRequestBytes. Before:
	// RequestTableBytes over both, so large answers to writes without a
	// key evicted keyed results.
	bytesByClass bool

	// Level 5 (levelPutServiceV2).

	// putServiceV2: KindPutServiceV2 is applied. Before: refused
	// (InvalidArgument); proposers folded the singular clusterIP into
	// clusterIPs themselves, and leaders never proposed it there.
	putServiceV2 bool
}

// rulesFor resolves the rules of feature level (1 when none was recorded).
func rulesFor(level int) rules {
	return rules{
		nonvoterMembers:       level >= KindLevel(KindSetMemberNonvoter),
		requestClasses:        level >= levelRequestClasses,
		networkPoolsKept:      level >= levelServiceRules,
		releaseWithoutNetwork: level >= levelServiceRules,
		repairByOffset:        level >= levelServiceRules,
		healthCheckInvalid:    level >= levelServiceRules,
		boundedResults:        level >= LevelBoundedResults,
		bytesByClass:          level >= levelServiceRules,
		putServiceV2:          level >= KindLevel(KindPutServiceV2),
	}
}

// setLevel records the cluster's feature level and puts its rules in
// force: on the raise, and when a snapshot is read (before its requests
// are put back). The request table moves to its classes and bounds here,
// once; it keeps them (a level never falls).
func (s *state) setLevel(level uint64) {
	s.featureLevel = level
	s.rules = rulesFor(s.level())
	if s.rules.requestClasses {
		s.requests.countClasses()
	}
	if s.rules.bytesByClass {
		s.requests.boundBytesByClass()
	}
}
