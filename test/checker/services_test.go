package checker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// svcState builds a state from "ns/name" -> values and pool -> value ->
// owner.
func svcState(services map[string][]string, pools map[string]map[string]string) ServiceState {
	return ServiceState{Node: "n1", Services: services, Pools: pools}
}

// A healthy end state: two Services, each holding what its record names,
// and a value of the allocation workload that no Service concerns.
var (
	okServices = map[string][]string{
		"a/web": {"ip=10.96.0.1", "port=30000", "port=30001"},
		"b/db":  {"ip=10.96.0.2"},
	}
	okPools = map[string]map[string]string{
		"ip":   {"10.96.0.1": "services/a/web", "10.96.0.2": "services/b/db", "10.96.0.9": "c1-3"},
		"port": {"30000": "services/a/web", "30001": "services/a/web"},
	}
)

// with returns a copy of okPools with pool/value held by owner ("" frees it).
func with(pool, value, owner string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for p, vs := range okPools {
		out[p] = map[string]string{}
		for v, o := range vs {
			out[p][v] = o
		}
	}
	if owner == "" {
		delete(out[pool], value)
	} else {
		out[pool][value] = owner
	}
	return out
}

// TestCheckServiceState shows the end-of-run check failing on each kind of
// damage it is for, naming the Service and the value, and passing a
// healthy state.
func TestCheckServiceState(t *testing.T) {
	cases := []struct {
		name     string
		state    ServiceState
		problems []string
	}{
		{name: "healthy", state: svcState(okServices, okPools)},
		{name: "empty", state: svcState(nil, nil)},
		{
			name: "a value named by two Services",
			state: svcState(map[string][]string{
				"a/web": {"ip=10.96.0.1", "port=30000", "port=30001"},
				"b/db":  {"ip=10.96.0.2", "port=30001"},
			}, okPools),
			problems: []string{
				`n1: port 30001 is named by two Services: a/web and b/db`,
				`n1: Service b/db names port 30001, which the pool holds for "services/a/web", not "services/b/db"`,
			},
		},
		{
			name:     "an orphan of a Service that does not exist",
			state:    svcState(okServices, with("port", "30005", "services/a/gone")),
			problems: []string{`n1: orphan: port 30005 is held by "services/a/gone", but there is no Service a/gone`},
		},
		{
			name:     "an orphan of a Service whose record does not name it",
			state:    svcState(okServices, with("port", "30005", "services/b/db")),
			problems: []string{`n1: orphan: port 30005 is held by "services/b/db", but Service b/db names [ip=10.96.0.2]`},
		},
		{
			name:     "a value a record names, free in the pool",
			state:    svcState(okServices, with("port", "30001", "")),
			problems: []string{`n1: Service a/web names port 30001, which is free in the pool`},
		},
		{
			name:     "a value a record names, held by someone else",
			state:    svcState(okServices, with("ip", "10.96.0.2", "c4-7")),
			problems: []string{`n1: Service b/db names ip 10.96.0.2, which the pool holds for "c4-7", not "services/b/db"`},
		},
		{
			name:  "a deleted Service still holding its values",
			state: svcState(map[string][]string{"b/db": {"ip=10.96.0.2"}}, okPools),
			problems: []string{
				`n1: orphan: ip 10.96.0.1 is held by "services/a/web", but there is no Service a/web`,
				`n1: orphan: port 30000 is held by "services/a/web", but there is no Service a/web`,
				`n1: orphan: port 30001 is held by "services/a/web", but there is no Service a/web`,
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckServiceState(c.state)
			assert.Equal(t, c.problems, r.Problems, "CheckServiceState problems")
			assert.Equal(t, len(c.problems) == 0, r.OK, "CheckServiceState OK")
		})
	}
	assert.Equal(t, 8, CheckServiceState(svcState(okServices, okPools)).Checked, "4 values named, 4 held by Services")
}

// TestCheckServiceReplicas shows a difference in a record or an owner
// reported with both nodes named.
func TestCheckServiceReplicas(t *testing.T) {
	n2 := func(services map[string][]string, pools map[string]map[string]string) ServiceState {
		return ServiceState{Node: "n2", Services: services, Pools: pools}
	}
	cases := []struct {
		name     string
		other    ServiceState
		problems []string
	}{
		{name: "the same", other: n2(okServices, okPools)},
		{
			name:  "a record missing",
			other: n2(map[string][]string{"a/web": okServices["a/web"]}, okPools),
			problems: []string{
				"Service b/db: n1 has a record naming [ip=10.96.0.2], n2 has no record",
			},
		},
		{
			name:     "a record naming other values",
			other:    n2(map[string][]string{"a/web": okServices["a/web"], "b/db": {"ip=10.96.0.3"}}, okPools),
			problems: []string{"Service b/db: n1 has a record naming [ip=10.96.0.2], n2 has a record naming [ip=10.96.0.3]"},
		},
		{
			name:     "a record at another revision",
			other:    ServiceState{Node: "n2", Services: okServices, Pools: okPools, Revisions: map[string]uint64{"b/db": 9}},
			problems: []string{"Service b/db: n1 has its record at revision 0, n2 at 9"},
		},
		{
			name:     "an owner differs",
			other:    n2(okServices, with("port", "30007", "services/b/db")),
			problems: []string{`port 30007: n1 has owner "", n2 has "services/b/db" ("": free)`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckServiceReplicas([]ServiceState{svcState(okServices, okPools), c.other})
			assert.Equal(t, c.problems, r.Problems, "CheckServiceReplicas problems")
			assert.Equal(t, 1, r.Checked)
		})
	}
}

// TestCheckServiceAcks shows the acknowledged writes judged against the
// final state where they decide it, and left alone where an unknown or
// overlapping write leaves it open.
func TestCheckServiceAcks(t *testing.T) {
	put := func(key string, call, ret int64, o Outcome, holds ...string) Op {
		return Op{Kind: KindServiceUpdate, Service: "a/web", Key: key, Call: call, Return: ret, Outcome: o,
			Result: "updated", Holds: holds, Revision: uint64(ret)}
	}
	del := func(key string, call, ret int64, o Outcome, code string) Op {
		return Op{Kind: KindServiceDelete, Service: "a/web", Key: key, Call: call, Return: ret, Outcome: o, Err: code}
	}
	web := []string{"ip=10.96.0.1", "port=30000", "port=30001"}
	present := svcState(okServices, okPools)
	absent := svcState(map[string][]string{"b/db": okServices["b/db"]}, with("ip", "10.96.0.1", ""))
	cases := []struct {
		name     string
		h        History
		final    ServiceState
		checked  int
		problems []string
	}{
		{name: "the last put is stored", h: History{put("k1", 10, 20, OK, "ip=10.96.0.9"), put("k2", 30, 40, OK, web...)},
			final: present, checked: 1},
		{name: "the last put answered other values", h: History{put("k1", 10, 20, OK, "ip=10.96.0.9")}, final: present, checked: 1,
			problems: []string{`Service a/web: its last write, service-update key="k1" client 0 [10,20] -> ok, updated holding [ip=10.96.0.9] at revision 20, answered [ip=10.96.0.9], but n1's record names [ip=10.96.0.1 port=30000 port=30001]`}},
		{name: "the last put is lost", h: History{put("k1", 10, 20, OK, web...)}, final: absent, checked: 1,
			problems: []string{`Service a/web: its last write, service-update key="k1" client 0 [10,20] -> ok, updated holding [ip=10.96.0.1 port=30000 port=30001] at revision 20, stored it, but n1 has no record of it`}},
		{name: "a deleted Service is back", h: History{put("k1", 10, 20, OK, web...), del("k2", 30, 40, OK, "")}, final: present, checked: 1,
			problems: []string{`Service a/web: its last write, service-delete key="k2" client 0 [30,40] -> ok, released [], deleted it, but n1 has a record naming [ip=10.96.0.1 port=30000 port=30001]`}},
		{name: "a delete answered ServiceNotFound decides too", h: History{del("k2", 30, 40, Fail, CodeServiceNotFound)}, final: present, checked: 1,
			problems: []string{`Service a/web: its last write, service-delete key="k2" client 0 [30,40] -> ServiceNotFound, deleted it, but n1 has a record naming [ip=10.96.0.1 port=30000 port=30001]`}},
		{name: "failures after the last put change nothing", h: History{put("k1", 10, 20, OK, web...), put("k2", 30, 40, Fail, "ip=10.96.0.7"),
			del("k3", 15, 50, Fail, "NoLeader")}, final: present, checked: 1},
		{name: "an unknown write leaves it open", h: History{put("k1", 10, 20, Unknown), del("k2", 30, 40, OK, "")}, final: present},
		{name: "an unknown write then an acknowledged retry decides", h: History{
			put("k1", 10, 20, Unknown), func() Op { o := put("k1", 25, 28, OK, web...); o.Attempt = 1; o.Revision = 20; return o }(),
			del("k2", 5, 8, OK, "")}, final: present, checked: 1},
		{name: "overlapping writes leave it open", h: History{put("k1", 10, 20, OK, web...), del("k2", 15, 40, OK, "")}, final: present},
		{name: "retries answered differently", h: History{put("k1", 10, 20, OK, web...),
			func() Op { o := put("k1", 25, 30, OK, "ip=10.96.0.4"); o.Attempt = 1; return o }()}, final: present, checked: 1,
			problems: []string{`Service a/web: key "k1" answered updated [ip=10.96.0.1 port=30000 port=30001] at revision 20 on attempt 0, then updated [ip=10.96.0.4] at revision 30 on attempt 1`}},
	}
	// With the record's revision, a Service is judged though an unknown
	// write leaves its last write open.
	at40 := present
	at40.Revisions = map[string]uint64{"a/web": 40, "b/db": 7}
	cases = append(cases, []struct {
		name     string
		h        History
		final    ServiceState
		checked  int
		problems []string
	}{
		{name: "the record is the write that answered its revision", h: History{put("k1", 30, 40, OK, web...), put("k2", 35, 60, Unknown)},
			final: at40, checked: 1},
		{name: "an acknowledged write later than the record was lost", h: History{put("k1", 30, 50, OK, web...), put("k2", 35, 60, Unknown)},
			final: at40, checked: 1,
			problems: []string{`Service a/web: service-update key="k1" client 0 [30,50] -> ok, updated holding [ip=10.96.0.1 port=30000 port=30001] at revision 50, but n1's record is at revision 40: the write was lost`}},
		{name: "the write that answered the record's revision answered other values", h: History{put("k1", 30, 40, OK, "ip=10.96.0.5"), put("k2", 35, 60, Unknown)},
			final: at40, checked: 1,
			problems: []string{`Service a/web: n1's record at revision 40 names [ip=10.96.0.1 port=30000 port=30001], but the writes that answered that revision answered otherwise: service-update key="k1" client 0 [30,40] -> ok, updated holding [ip=10.96.0.5] at revision 40`}},
		{name: "two writes in one log entry answered its revision; the record is one of them", h: History{put("k1", 30, 40, OK, "ip=10.96.0.5"),
			put("k2", 32, 40, OK, web...), put("k3", 35, 60, Unknown)}, final: at40, checked: 1},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckServiceAcks(c.h, c.final)
			assert.Equal(t, c.problems, r.Problems, "CheckServiceAcks problems")
			assert.Equal(t, c.checked, r.Checked, "CheckServiceAcks checked")
			assert.Equal(t, len(c.problems) == 0, r.OK)
		})
	}
}

// TestServiceCounts counts logical writes, not attempts.
func TestServiceCounts(t *testing.T) {
	h := History{
		{Kind: KindServiceCreate, Service: "a/x", Key: "k1", Outcome: Unknown},
		{Kind: KindServiceCreate, Service: "a/x", Key: "k1", Outcome: OK, Attempt: 1},
		{Kind: KindServiceUpdate, Service: "a/x", Key: "k2", Outcome: Fail, Err: CodeInvalid},
		{Kind: KindServiceDelete, Service: "a/x", Key: "k3", Outcome: Unknown},
		{Kind: KindAllocate, Pool: "p", Key: "k4", Outcome: OK},
	}
	assert.Equal(t, map[string]int{"service-create ok": 1, "service-update fail": 1, "service-update Invalid": 1,
		"service-delete unknown": 1}, ServiceCounts(h))
}
