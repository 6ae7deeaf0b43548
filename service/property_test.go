package service

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// randomSpec draws a spec from small sets of values, so that collisions
// with stored values are common.
func randomSpec(r *rand.Rand) Spec {
	pick := func(v ...string) string { return v[r.IntN(len(v))] }
	s := Spec{Namespace: "default", Name: "foo", UID: pick("uid-1", "uid-1", "uid-1", "uid-2", ""),
		Type:                  pick("", TypeClusterIP, TypeNodePort, TypeLoadBalancer, TypeLoadBalancer, TypeExternalName),
		IPFamilyPolicy:        pick("", "", SingleStack, PreferDualStack, RequireDualStack),
		ExternalTrafficPolicy: pick("", TrafficCluster, TrafficLocal, TrafficLocal),
	}
	switch r.IntN(6) {
	case 1:
		s.ClusterIPs = []string{pick("10.0.0.9", "10.0.0.10", "2000::9", ClusterIPNone, "10.1.0.1")}
	case 2:
		s.ClusterIPs = []string{pick("10.0.0.9", "2000::9"), pick("10.0.0.9", "2000::9", "2000::8", "10.0.0.7")}
	}
	switch r.IntN(4) {
	case 1:
		s.IPFamilies = []Family{Family(pick("IPv4", "IPv6"))}
	case 2:
		s.IPFamilies = []Family{Family(pick("IPv4", "IPv6")), Family(pick("IPv4", "IPv6"))}
	}
	if r.IntN(4) == 0 {
		f := false
		s.HasSelector = &f
	}
	if r.IntN(3) == 0 {
		b := r.IntN(2) == 0
		s.AllocateLoadBalancerNodePorts = &b
	}
	for i := r.IntN(4); i > 0; i-- {
		np := int32(0)
		if r.IntN(2) == 0 {
			np = int32(30080 + r.IntN(4))
		}
		s.Ports = append(s.Ports, Port{Name: pick("p", "q", "r"), Protocol: pick("", ProtocolTCP, ProtocolUDP),
			Port: int32(80 + r.IntN(3)), NodePort: np})
	}
	if r.IntN(3) == 0 {
		s.HealthCheckNodePort = int32(30080 + r.IntN(4))
	}
	return s
}

// pickFor returns a fresh value for a dynamic Need.
func pickFor(n Need, i int) string {
	switch {
	case n.Kind != KindClusterIP:
		return strconv.Itoa(31000 + i)
	case n.Family == IPv6:
		return fmt.Sprintf("2000::1:%x", i)
	default:
		return fmt.Sprintf("10.0.1.%d", i+1)
	}
}

// TestPlanProperties writes random specs over random stored records and
// checks what every plan must satisfy: no panic, deterministic output,
// releases only of stored values, no value both kept and released, no value
// needed twice, and a record whose PlanDelete is exactly the Needs.
func TestPlanProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	nets := [][]Family{{IPv4}, {IPv6}, {IPv4, IPv6}, {IPv6, IPv4}}
	accepted := 0
	for iter := range 20000 {
		n := network(t, nets[r.IntN(len(nets))]...)
		var st *Spec
		if r.IntN(4) != 0 {
			p, err := PlanWrite(n, nil, randomSpec(r))
			if err != nil {
				continue
			}
			picks := []string{}
			for i, nd := range p.Dynamic() {
				picks = append(picks, pickFor(nd, i))
			}
			rec, err := Complete(p, picks)
			if err != nil {
				t.Fatalf("iter %d: Complete: %v", iter, err)
			}
			st = &rec
		}
		spec := randomSpec(r)
		p, err := PlanWrite(n, st, spec)
		if err != nil {
			var el Errors
			if !errors.As(err, &el) || len(el) == 0 {
				t.Fatalf("iter %d: error %v is not Errors", iter, err)
			}
			continue
		}
		accepted++
		p2, _ := PlanWrite(n, st, spec)
		if !slices.Equal(fmtNeeds(p.Needs), fmtNeeds(p2.Needs)) || !slices.Equal(fmtHeld(p.Release), fmtHeld(p2.Release)) {
			t.Fatalf("iter %d: not deterministic", iter)
		}
		checkInvariants(t, st, p)
		seen := map[Held]bool{}
		for _, nd := range p.Needs {
			if nd.Value == "" {
				continue
			}
			k := poolKey(nd.Kind, nd.Family, nd.Value)
			if seen[k] {
				t.Fatalf("iter %d: %v needed twice: %q", iter, k, fmtNeeds(p.Needs))
			}
			seen[k] = true
		}
		picks := []string{}
		for i, nd := range p.Dynamic() {
			picks = append(picks, pickFor(nd, 100+i))
		}
		rec, err := Complete(p, picks)
		if err != nil {
			t.Fatalf("iter %d: Complete: %v", iter, err)
		}
		// The record holds exactly what the plan needed.
		var want []string
		for _, nd := range p.Needs {
			v := nd.Value
			if v == "" {
				v = picks[slices.IndexFunc(p.Dynamic(), func(d Need) bool { return d.Field == nd.Field })]
			}
			h := Held{Kind: nd.Kind, Family: nd.Family, Value: v}
			want = append(want, fmtHeld([]Held{h})...)
		}
		if got := fmtHeld(PlanDelete(rec)); !slices.Equal(got, orEmpty(want)) {
			t.Fatalf("iter %d: record holds %q, plan needed %q\nspec %+v\nrecord %+v", iter, got, want, spec, rec)
		}
	}
	if accepted < 1000 {
		t.Errorf("only %d of 20000 writes accepted; the generator is too hostile to test much", accepted)
	}
}

// TestPlanNoPanicOnAnyStored: a stored record that no plan produced (say,
// written by an older version) must not make PlanWrite or PlanDelete panic:
// the state machine calls them inside Apply.
func TestPlanNoPanicOnAnyStored(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	nets := [][]Family{{IPv4}, {IPv6}, {IPv4, IPv6}, {IPv6, IPv4}}
	for range 20000 {
		n := network(t, nets[r.IntN(len(nets))]...)
		st := randomSpec(r)
		_ = PlanDelete(st)
		p, err := PlanWrite(n, &st, randomSpec(r))
		if err == nil {
			checkInvariants(t, &st, p)
		}
	}
}
