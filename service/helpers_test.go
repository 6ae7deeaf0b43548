package service

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rangealloc/rangealloc/allocator"
)

// The networks of kube-apiserver's storage tests: 10.0.0.0/16, 2000::/108,
// node ports 30000-32767.
func network(t testing.TB, fams ...Family) Network {
	t.Helper()
	n := Network{IPRanges: map[Family]allocator.Range{}}
	for _, f := range fams {
		cidr := "10.0.0.0/16"
		if f == IPv6 {
			cidr = "2000::/108"
		}
		r, err := allocator.ParseRange(cidr)
		if err != nil {
			t.Fatal(err)
		}
		n.Families = append(n.Families, f)
		n.IPRanges[f] = r
	}
	r, err := allocator.ParseRange("30000-32767")
	if err != nil {
		t.Fatal(err)
	}
	n.NodePorts = r
	return n
}

type tweak func(*Spec)

func svc(tweaks ...tweak) Spec {
	s := Spec{Namespace: "default", Name: "foo", UID: "uid-1",
		Ports: []Port{{Name: "p", Protocol: ProtocolTCP, Port: 93}}}
	for _, f := range tweaks {
		f(&s)
	}
	return s
}

func stored(tweaks ...tweak) *Spec {
	s := svc(tweaks...)
	return &s
}

func typ(t string) tweak { return func(s *Spec) { s.Type = t } }
func ips(v ...string) tweak {
	return func(s *Spec) { s.ClusterIPs = v }
}
func fams(v ...Family) tweak { return func(s *Spec) { s.IPFamilies = v } }
func policy(p string) tweak  { return func(s *Spec) { s.IPFamilyPolicy = p } }
func uid(u string) tweak     { return func(s *Spec) { s.UID = u } }
func selectorless() tweak    { return func(s *Spec) { f := false; s.HasSelector = &f } }
func ports(p ...Port) tweak  { return func(s *Spec) { s.Ports = p } }
func local() tweak           { return func(s *Spec) { s.ExternalTrafficPolicy = TrafficLocal } }
func hcport(v int32) tweak   { return func(s *Spec) { s.HealthCheckNodePort = v } }
func allocLBNodePorts(b bool) tweak {
	return func(s *Spec) { s.AllocateLoadBalancerNodePorts = &b }
}

func tcp(name string, port, nodePort int32) Port {
	return Port{Name: name, Protocol: ProtocolTCP, Port: port, NodePort: nodePort}
}
func udp(name string, port, nodePort int32) Port {
	return Port{Name: name, Protocol: ProtocolUDP, Port: port, NodePort: nodePort}
}

// fmtNeeds renders Needs as "field [family] dyn|req:V|keep:V [ports=...]".
func fmtNeeds(ns []Need) []string {
	out := []string{}
	for _, n := range ns {
		s := n.Field
		if n.Kind == KindClusterIP {
			s += "/" + string(n.Family)
		}
		switch {
		case n.Value == "":
			s += " dyn"
		case n.Keep:
			s += " keep:" + n.Value
		default:
			s += " req:" + n.Value
		}
		if len(n.Ports) > 1 {
			s += fmt.Sprintf(" ports=%v", n.Ports)
		}
		out = append(out, s)
	}
	return out
}

func fmtHeld(hs []Held) []string {
	out := []string{}
	for _, h := range hs {
		s := h.Kind.String()
		if h.Family != "" {
			s += "/" + string(h.Family)
		}
		out = append(out, s+" "+h.Value)
	}
	return out
}

type planCase struct {
	name    string
	net     []Family // default IPv4
	stored  *Spec
	spec    Spec
	needs   []string
	release []string
	// Optional checks of the defaulted spec.
	families []Family
	policy   string
	// err is the exact Error() text; errField the first error's field.
	err string
}

func runPlanCases(t *testing.T, cases []planCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := tc.net
			if fs == nil {
				fs = []Family{IPv4}
			}
			in := clone(tc.spec)
			p, err := PlanWrite(network(t, fs...), tc.stored, tc.spec)
			if !equalSpec(in, tc.spec) {
				t.Errorf("PlanWrite modified its input")
			}
			if tc.err != "" {
				var el Errors
				if !errors.As(err, &el) {
					t.Fatalf("err = %v, want Errors %q", err, tc.err)
				}
				if err.Error() != tc.err {
					t.Fatalf("err =\n  %s\nwant\n  %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := fmtNeeds(p.Needs); !slices.Equal(got, orEmpty(tc.needs)) {
				t.Errorf("needs =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.needs, "\n  "))
			}
			if got := fmtHeld(p.Release); !slices.Equal(got, orEmpty(tc.release)) {
				t.Errorf("release = %q, want %q", got, tc.release)
			}
			if tc.families != nil && !slices.Equal(p.Spec.IPFamilies, tc.families) {
				t.Errorf("ipFamilies = %v, want %v", p.Spec.IPFamilies, tc.families)
			}
			if tc.policy != "" && p.Spec.IPFamilyPolicy != tc.policy {
				t.Errorf("ipFamilyPolicy = %q, want %q", p.Spec.IPFamilyPolicy, tc.policy)
			}
			checkInvariants(t, tc.stored, p)
			// Determinism: the same inputs plan the same.
			p2, _ := PlanWrite(network(t, fs...), tc.stored, tc.spec)
			if !slices.Equal(fmtNeeds(p2.Needs), fmtNeeds(p.Needs)) || !slices.Equal(fmtHeld(p2.Release), fmtHeld(p.Release)) {
				t.Errorf("second plan differs")
			}
		})
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func equalSpec(a, b Spec) bool {
	show := func(s Spec) string {
		h, l := deref(s.HasSelector), deref(s.AllocateLoadBalancerNodePorts)
		s.HasSelector, s.AllocateLoadBalancerNodePorts = nil, nil
		return fmt.Sprintf("%#v|%s|%s", s, h, l)
	}
	return show(a) == show(b)
}

func deref(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

// checkInvariants: releases are stored values, none kept, none twice; a
// kept value is held by the stored record.
func checkInvariants(t *testing.T, st *Spec, p Plan) {
	t.Helper()
	var held []Held
	if st != nil {
		held = PlanDelete(*st)
	}
	seen := map[Held]bool{}
	for _, r := range p.Release {
		k := poolKey(r.Kind, r.Family, r.Value)
		if seen[k] {
			t.Errorf("released twice: %v", r)
		}
		seen[k] = true
		if !slices.Contains(held, r) {
			t.Errorf("released %v, which the stored record does not hold", r)
		}
	}
	for _, n := range p.Needs {
		k := poolKey(n.Kind, n.Family, n.Value)
		if n.Keep && seen[k] {
			t.Errorf("kept and released: %v", n)
		}
		if n.Keep && !slices.ContainsFunc(held, func(h Held) bool { return poolKey(h.Kind, h.Family, h.Value) == k }) {
			t.Errorf("kept %v, which the stored record does not hold", n)
		}
	}
}
