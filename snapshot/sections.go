package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The section readers below check each rule as soon as the bytes it needs
// have arrived, and add to an error the item it concerns. Counts read from
// the stream only bound loops; slices grow as items arrive.

func (d *decoder) pools() ([]Pool, error) {
	if err := d.tag(tagPools, "pools"); err != nil {
		return nil, err
	}
	n, err := d.uvarint("pool count")
	if err != nil {
		return nil, err
	}
	var pools []Pool
	for i := uint64(0); i < n; i++ {
		p, j, err := d.pool(pools)
		if err != nil {
			return nil, fmt.Errorf("%w (pool %d%s)", err, i, where(p.Name, "allocation", j))
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// where describes the place of an error inside an item: its name if known,
// and the index of the sub-item if any (j >= 0).
func where(name, sub string, j int64) string {
	s := ""
	if name != "" {
		s = fmt.Sprintf(" %q", name)
	}
	if j >= 0 {
		s += fmt.Sprintf(", %s %d", sub, j)
	}
	return s
}

// pool reads one pool; pools are the ones before it. On error it returns
// the name if it got that far, and the index of the allocation at fault
// (-1 if none).
func (d *decoder) pool(pools []Pool) (Pool, int64, error) {
	var p Pool
	start := d.off()
	name, err := d.str("pool name", 1, maxName)
	if err != nil {
		return p, -1, err
	}
	p.Name = name
	if err := checkLabel(name); err != nil {
		return p, -1, corrupt(start, err)
	}
	if i := len(pools); i > 0 {
		if err := checkOrder("pool name", i, pools[i-1].Name, name); err != nil {
			return p, -1, corrupt(start, err)
		}
	}
	start = d.off()
	if p.Range, err = d.str("range", 1, maxRange); err != nil {
		return p, -1, err
	}
	if err := checkRange(p.Range); err != nil {
		return p, -1, corrupt(start, err)
	}
	if p.Data, err = d.bytes("data", maxData); err != nil {
		return p, -1, err
	}
	start = d.off()
	k, err := d.uvarint("allocation count")
	if err != nil {
		return p, -1, err
	}
	if err := checkAllocations(k, p.Data); err != nil {
		return p, -1, corrupt(start, err)
	}
	for j := uint64(0); j < k; j++ {
		a, err := d.allocation()
		if err != nil {
			return p, int64(j), err
		}
		if len(p.Allocations) == cap(p.Allocations) {
			p.Allocations = grow(p.Allocations, k)
		}
		p.Allocations = append(p.Allocations, a)
	}
	return p, -1, nil
}

// grow returns s with room for more elements, at most k in all. k is
// bounded by the bits of data actually read, yet a damaged data can claim a
// million records; so capacity grows fourfold as records arrive, never
// beyond four times what arrived. Fourfold, not append's 1.25-fold for
// large slices, keeps a million-record pool at 1.3 times its final size in
// allocations instead of 5 times.
func grow[T any](s []T, k uint64) []T {
	c := min(k, uint64(max(maxPrealloc, 4*cap(s))))
	out := make([]T, len(s), c)
	copy(out, s)
	return out
}

func (d *decoder) allocation() (Allocation, error) {
	var a Allocation
	owner, err := d.str("owner", 0, maxOwner)
	if err != nil {
		return a, err
	}
	a.Owner = owner
	start := d.off()
	p, err := d.next("flags", 1)
	if err != nil {
		return a, err
	}
	if p[0]&^flagStatic != 0 {
		return a, corrupt(start, fmt.Errorf("flags 0x%02x has unknown bits", p[0]))
	}
	a.Static = p[0]&flagStatic != 0
	start = d.off()
	if a.Revision, err = d.uvarint("revision"); err != nil {
		return a, err
	}
	if a.Revision == 0 {
		return a, corrupt(start, errors.New("revision 0"))
	}
	return a, nil
}

func (d *decoder) requests() ([]Request, error) {
	if err := d.tag(tagReqs, "requests"); err != nil {
		return nil, err
	}
	n, err := d.uvarint("request count")
	if err != nil {
		return nil, err
	}
	var reqs []Request
	seen := make(map[string]struct{})
	for i := uint64(0); i < n; i++ {
		r, err := d.request(seen)
		if err != nil {
			return nil, fmt.Errorf("%w (request %d%s)", err, i, where(r.ID, "", -1))
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

func (d *decoder) request(seen map[string]struct{}) (Request, error) {
	var r Request
	start := d.off()
	id, err := d.str("request ID", 1, maxReqID)
	if err != nil {
		return r, err
	}
	r.ID = id
	if _, dup := seen[id]; dup {
		return r, corrupt(start, fmt.Errorf("request ID %q appears twice", id))
	}
	seen[id] = struct{}{}
	if r.Index, err = d.uvarint("request index"); err != nil {
		return r, err
	}
	p, err := d.next("fingerprint", 8)
	if err != nil {
		return r, err
	}
	r.Fingerprint = binary.BigEndian.Uint64(p)
	r.Result, err = d.bytes("result", maxResult)
	return r, err
}

func (d *decoder) members() ([]Member, error) {
	if err := d.tag(tagMembers, "members"); err != nil {
		return nil, err
	}
	n, err := d.uvarint("member count")
	if err != nil {
		return nil, err
	}
	var members []Member
	for i := uint64(0); i < n; i++ {
		m, err := d.member(members)
		if err != nil {
			return nil, fmt.Errorf("%w (member %d%s)", err, i, where(m.ID, "", -1))
		}
		members = append(members, m)
	}
	return members, nil
}

func (d *decoder) member(members []Member) (Member, error) {
	var m Member
	start := d.off()
	id, err := d.str("member ID", 1, maxMemberID)
	if err != nil {
		return m, err
	}
	m.ID = id
	if i := len(members); i > 0 {
		if err := checkOrder("member ID", i, members[i-1].ID, id); err != nil {
			return m, corrupt(start, err)
		}
	}
	if m.RaftAddr, err = d.str("raft address", 0, maxAddr); err != nil {
		return m, err
	}
	if m.APIAddr, err = d.str("API address", 0, maxAddr); err != nil || d.version < 4 {
		return m, err
	}
	start = d.off()
	p, err := d.next("member flags", 1)
	if err != nil {
		return m, err
	}
	if p[0]&^flagNonvoter != 0 {
		return m, corrupt(start, fmt.Errorf("member flags 0x%02x: unknown bits", p[0]))
	}
	m.Nonvoter = p[0]&flagNonvoter != 0
	return m, nil
}

// services reads the services section: the service network, then the
// Service records.
func (d *decoder) services(s *State) error {
	if err := d.tag(tagSvc, "services"); err != nil {
		return err
	}
	start := d.off()
	p, err := d.next("service network flag", 1)
	if err != nil {
		return err
	}
	switch p[0] {
	case 0:
	case 1:
		n := &Network{}
		k, err := d.length("family count", 1, maxFamilies)
		if err != nil {
			return err
		}
		for i := 0; i < k; i++ {
			f, err := d.str("family", 1, 4)
			if err != nil {
				return err
			}
			n.Families = append(n.Families, f)
		}
		if n.IPv4Pool, err = d.str("IPv4 pool", 0, maxName); err != nil {
			return err
		}
		if n.IPv6Pool, err = d.str("IPv6 pool", 0, maxName); err != nil {
			return err
		}
		if n.NodePortPool, err = d.str("node-port pool", 0, maxName); err != nil {
			return err
		}
		if err := validateNetwork(n); err != nil {
			return corrupt(start, fmt.Errorf("service network: %w", err))
		}
		s.Network = n
	default:
		return corrupt(start, fmt.Errorf("service network flag 0x%02x, want 0 or 1", p[0]))
	}
	count, err := d.uvarint("Service count")
	if err != nil {
		return err
	}
	for i := uint64(0); i < count; i++ {
		var sv Service
		start := d.off()
		if sv.Key, err = d.str("Service key", 3, maxSvcKey); err != nil {
			return fmt.Errorf("%w (Service %d)", err, i)
		}
		if sv.Revision, err = d.uvarint("Service revision"); err != nil {
			return fmt.Errorf("%w (Service %d)", err, i)
		}
		if sv.Spec, err = d.bytes("Service spec", maxSpec); err != nil {
			return fmt.Errorf("%w (Service %d)", err, i)
		}
		if err := validateService(&sv, len(s.Services), append(s.Services, sv)); err != nil {
			return corrupt(start, fmt.Errorf("Service %d%s: %w", i, where(sv.Key, "", -1), err))
		}
		if len(s.Services) == cap(s.Services) {
			s.Services = grow(s.Services, count)
		}
		s.Services = append(s.Services, sv)
	}
	s.ServicesFreed, err = d.uvarint("services freed index")
	return err
}
