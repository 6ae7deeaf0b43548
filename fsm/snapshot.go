package fsm

import (
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/snapshot"
)

var _ raft.FSMSnapshot = (*state)(nil)

// clone returns a copy that shares nothing mutable with s. Results in the
// request table are immutable and shared.
func (s *state) clone() *state {
	c := &state{pools: make(map[string]*pool, len(s.pools)), requests: s.requests.clone(),
		members: make(map[string]Member, len(s.members)), index: s.index, term: s.term, clusterID: s.clusterID,
		network: s.network, services: make(map[string]*ServiceRecord, len(s.services)), freed: s.freed,
		featureLevel: s.featureLevel, rules: s.rules}
	for k, r := range s.services { // records are replaced, never changed: share them
		c.services[k] = r
	}
	for name, p := range s.pools {
		c.pools[name] = &pool{name: p.name, p: p.p.Clone(), recs: p.recs.clone()}
	}
	for id, m := range s.members {
		c.members[id] = m
	}
	return c
}

// Persist writes the captured state in the format of package snapshot.
func (s *state) Persist(sink raft.SnapshotSink) error {
	if err := snapshot.Write(sink, s.export()); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release is a no-op: the captured copy is garbage once unreferenced.
func (s *state) Release() {}

// export converts the state to the snapshot package's plain types.
func (s *state) export() *snapshot.State {
	out := &snapshot.State{Index: s.index, Term: s.term, ClusterID: s.clusterID}
	for _, name := range s.poolNames() {
		p := s.pools[name]
		rng, data := p.p.Snapshot()
		sp := snapshot.Pool{Name: name, Range: rng, Data: data,
			Allocations: make([]snapshot.Allocation, 0, p.p.Used())}
		p.p.ForEachUsed(func(off int) bool {
			r := p.recs.get(off)
			sp.Allocations = append(sp.Allocations, snapshot.Allocation{Owner: r.owner, Static: r.static(), Revision: r.revision()})
			return true
		})
		out.Pools = append(out.Pools, sp)
	}
	for _, e := range s.requests.entries() {
		out.Requests = append(out.Requests, snapshot.Request{ID: e.id, Index: e.index, Fingerprint: e.fp, Result: e.result})
	}
	for _, m := range s.members {
		out.Members = append(out.Members, snapshot.Member{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Nonvoter: m.Nonvoter})
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	if s.network.Set() {
		out.Network = &snapshot.Network{IPv4Pool: s.network.IPv4Pool, IPv6Pool: s.network.IPv6Pool, NodePortPool: s.network.NodePortPool}
		for _, f := range s.network.Families {
			out.Network.Families = append(out.Network.Families, string(f))
		}
	}
	for _, key := range s.serviceKeys() {
		r := s.services[key]
		out.Services = append(out.Services, snapshot.Service{Key: key, Revision: r.Revision, Spec: EncodeSpec(&r.Spec)})
	}
	out.ServicesFreed = s.freed
	out.FeatureLevel = s.featureLevel
	return out
}

// importState builds a state from a decoded snapshot, checking what the
// codec cannot: that ranges parse, that bitmaps fit their ranges, and that
// remembered results decode. (The codec has checked structure: sorted,
// unique names and IDs, and one allocation record per set bit; the count
// is checked again here because the loop below indexes by it.)
func importState(ss *snapshot.State) (*state, error) {
	s := newState()
	s.index, s.term = ss.Index, ss.Term
	if ss.FeatureLevel > MaxFeatureLevel {
		return nil, fmt.Errorf("snapshot: %w", errLevelTooHigh(ss.FeatureLevel))
	}
	s.setLevel(ss.FeatureLevel)
	if ss.ClusterID != "" {
		if err := ValidateClusterID(ss.ClusterID); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		s.clusterID = ss.ClusterID
	}
	for _, sp := range ss.Pools {
		p, err := importPool(sp)
		if err != nil {
			return nil, err
		}
		s.pools[sp.Name] = p
	}
	for _, sr := range ss.Requests {
		if err := validResult(sr.Result); err != nil {
			return nil, fmt.Errorf("snapshot: request %q: %w", sr.ID, err)
		}
		s.requests.put(&requestEntry{id: sr.ID, fp: sr.Fingerprint, index: sr.Index, result: sr.Result})
	}
	for _, m := range ss.Members {
		s.members[m.ID] = Member{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Nonvoter: m.Nonvoter}
	}
	if ss.Network != nil {
		n := ServiceNetwork{IPv4Pool: ss.Network.IPv4Pool, IPv6Pool: ss.Network.IPv6Pool, NodePortPool: ss.Network.NodePortPool}
		for _, f := range ss.Network.Families {
			n.Families = append(n.Families, service.Family(f))
		}
		if err := checkNetworkShape(n); err != nil {
			return nil, fmt.Errorf("snapshot: service network: %w", err)
		}
		s.network = n
	}
	for _, sv := range ss.Services {
		spec, err := DecodeSpec(sv.Spec)
		if err != nil {
			return nil, fmt.Errorf("snapshot: Service %q: %w", sv.Key, err)
		}
		if err := ValidateServiceName(spec.Namespace, spec.Name); err != nil || spec.Namespace+"/"+spec.Name != sv.Key || sv.Revision == 0 {
			return nil, fmt.Errorf("snapshot: Service %q: bad record", sv.Key)
		}
		s.services[sv.Key] = &ServiceRecord{Spec: spec, Revision: sv.Revision}
	}
	s.freed = ss.ServicesFreed
	return s, nil
}

// importPool builds a pool from a snapshot's, checking that its range
// parses, that its bitmap fits the range, and that each set bit has a
// record.
func importPool(sp snapshot.Pool) (*pool, error) {
	if err := ValidatePoolName(sp.Name); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	rng, err := allocator.ParseRange(sp.Range)
	if err != nil {
		return nil, fmt.Errorf("snapshot: pool %q: %w", sp.Name, err)
	}
	ap := allocator.NewPool(rng)
	if err := ap.Restore(sp.Range, sp.Data); err != nil {
		return nil, fmt.Errorf("snapshot: pool %q: %w", sp.Name, err)
	}
	if ap.Used() != len(sp.Allocations) {
		return nil, fmt.Errorf("snapshot: pool %q: %d allocation records for %d set bits", sp.Name, len(sp.Allocations), ap.Used())
	}
	p := &pool{name: sp.Name, p: ap}
	i := 0
	var bad error
	ap.ForEachUsed(func(off int) bool {
		a := sp.Allocations[i]
		i++
		if len(a.Owner) > MaxOwnerLen || a.Revision == 0 || a.Revision >= staticBit {
			bad = fmt.Errorf("snapshot: pool %q: bad allocation record at offset %d", sp.Name, off)
			return false
		}
		p.take(off, a.Owner, a.Static, a.Revision)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	return p, nil
}

// WriteBackup writes the current state in the snapshot format: what
// Snapshot and Persist produce, for backups taken over the API.
func (f *FSM) WriteBackup(w io.Writer) error {
	f.mu.RLock()
	s := f.s.clone()
	f.mu.RUnlock()
	return snapshot.Write(w, s.export())
}
