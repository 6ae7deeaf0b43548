package service

import (
	"github.com/rangealloc/rangealloc/allocator"
	"slices"
	"testing"
)

func TestPlanDelete(t *testing.T) {
	cases := []struct {
		name string
		rec  Spec
		want []string
	}{{
		name: "ExternalName holds nothing",
		rec:  svc(typ(TypeExternalName)),
		want: []string{},
	}, {
		name: "headless holds nothing",
		rec:  svc(ips(ClusterIPNone), fams(IPv4, IPv6), policy(RequireDualStack)),
		want: []string{},
	}, {
		name: "dual-stack LoadBalancer Local with shared TCP/UDP nodePort",
		rec: svc(typ(TypeLoadBalancer), ips("2000::9", "10.0.0.9"), fams(IPv6, IPv4), policy(RequireDualStack), local(), hcport(30200),
			ports(tcp("dns", 53, 30053), udp("dnsu", 53, 30053), tcp("web", 80, 30080))),
		want: []string{"ClusterIP/IPv6 2000::9", "ClusterIP/IPv4 10.0.0.9", "NodePort 30053", "NodePort 30080", "HealthCheckNodePort 30200"},
	}, {
		name: "LoadBalancer Cluster: a stray healthCheckNodePort is not held",
		rec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), hcport(30200), ports(tcp("p", 80, 30080))),
		want: []string{"ClusterIP/IPv4 10.0.0.9", "NodePort 30080"},
	}, {
		name: "ClusterIP: stray nodePorts are not held",
		rec:  svc(ips("10.0.0.9"), ports(tcp("p", 80, 30080))),
		want: []string{"ClusterIP/IPv4 10.0.0.9"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmtHeld(PlanDelete(tc.rec)); !slices.Equal(got, tc.want) {
				t.Errorf("PlanDelete = %q, want %q", got, tc.want)
			}
		})
	}
}

// A create, completed, then updated and deleted: the record Complete
// returns is what the next write plans against.
func TestCompleteRoundTrip(t *testing.T) {
	n := network(t, IPv4, IPv6)
	spec := svc(typ(TypeLoadBalancer), policy(PreferDualStack), local(),
		ports(tcp("dns", 53, 0), udp("dnsu", 53, 0), tcp("web", 80, 30080)))
	p, err := PlanWrite(n, nil, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.clusterIPs[0]/IPv4 dyn", "spec.clusterIPs[1]/IPv6 dyn",
		"spec.ports[0].nodePort dyn ports=[0 1]", "spec.ports[2].nodePort req:30080", "spec.healthCheckNodePort dyn"}
	if got := fmtNeeds(p.Needs); !slices.Equal(got, want) {
		t.Fatalf("needs = %q, want %q", got, want)
	}
	if got := fmtNeeds(p.Requests()); !slices.Equal(got, []string{"spec.ports[2].nodePort req:30080"}) {
		t.Errorf("Requests = %q", got)
	}
	if len(p.Dynamic()) != 4 {
		t.Fatalf("Dynamic = %d needs, want 4", len(p.Dynamic()))
	}
	if _, err := Complete(p, []string{"10.0.0.1"}); err == nil {
		t.Error("Complete accepted too few picks")
	}
	if _, err := Complete(p, []string{"10.0.0.1", "2000::1", "x", "30201"}); err == nil {
		t.Error("Complete accepted a non-port pick")
	}
	if _, err := Complete(p, []string{"10.0.0.1", "", "30053", "30201"}); err == nil {
		t.Error("Complete accepted an empty pick")
	}
	rec, err := Complete(p, []string{"10.0.0.1", "2000::1", "30053", "30201"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.ClusterIPs, []string{"10.0.0.1", "2000::1"}) ||
		!slices.Equal(rec.IPFamilies, []Family{IPv4, IPv6}) || rec.IPFamilyPolicy != PreferDualStack {
		t.Errorf("record IPs = %v %v %s", rec.ClusterIPs, rec.IPFamilies, rec.IPFamilyPolicy)
	}
	if rec.Ports[0].NodePort != 30053 || rec.Ports[1].NodePort != 30053 || rec.Ports[2].NodePort != 30080 || rec.HealthCheckNodePort != 30201 {
		t.Errorf("record ports = %+v, hc %d", rec.Ports, rec.HealthCheckNodePort)
	}
	if p.Spec.ClusterIPs[0] != "" {
		t.Error("Complete modified the plan's spec")
	}

	// The same spec PUT again (everything left out) keeps everything.
	p2, err := PlanWrite(n, &rec, spec)
	if err != nil {
		t.Fatal(err)
	}
	want2 := []string{"spec.clusterIPs[0]/IPv4 keep:10.0.0.1", "spec.clusterIPs[1]/IPv6 keep:2000::1",
		"spec.ports[0].nodePort keep:30053 ports=[0 1]", "spec.ports[2].nodePort keep:30080", "spec.healthCheckNodePort keep:30201"}
	if got := fmtNeeds(p2.Needs); !slices.Equal(got, want2) || len(p2.Release) != 0 || len(p2.Dynamic()) != 0 {
		t.Errorf("idempotent PUT: needs = %q, release = %v", got, p2.Release)
	}
	rec2, err := Complete(p2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtHeld(PlanDelete(rec2)), fmtHeld(PlanDelete(rec)); !slices.Equal(got, want) {
		t.Errorf("records differ: %q vs %q", got, want)
	}
	wantDel := []string{"ClusterIP/IPv4 10.0.0.1", "ClusterIP/IPv6 2000::1", "NodePort 30053", "NodePort 30080", "HealthCheckNodePort 30201"}
	if got := fmtHeld(PlanDelete(rec2)); !slices.Equal(got, wantDel) {
		t.Errorf("PlanDelete = %q, want %q", got, wantDel)
	}
}

func TestPlanWriteBadNetwork(t *testing.T) {
	n := network(t, IPv4)
	for name, bad := range map[string]Network{
		"no families":   {NodePorts: n.NodePorts},
		"no range":      {Families: []Family{IPv6}, IPRanges: n.IPRanges, NodePorts: n.NodePorts},
		"family twice":  {Families: []Family{IPv4, IPv4}, IPRanges: n.IPRanges, NodePorts: n.NodePorts},
		"three":         {Families: []Family{IPv4, IPv6, IPv4}, IPRanges: n.IPRanges, NodePorts: n.NodePorts},
		"wrong mapping": {Families: []Family{IPv6}, IPRanges: map[Family]allocator.Range{IPv6: n.IPRanges[IPv4]}, NodePorts: n.NodePorts},
	} {
		if _, err := PlanWrite(bad, nil, svc()); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestErrorsText(t *testing.T) {
	el := Errors{invalid("spec.a", int32(3), "bad"), forbidden("spec.b", "no")}
	if got, want := el.Error(), "[spec.a: Invalid value: 3: bad, spec.b: Forbidden: no]"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
