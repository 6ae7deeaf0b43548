package service

import (
	"slices"
	"testing"
)

func singular(ip string) tweak { return func(s *Spec) { s.ClusterIP = ip } }

// A stored RequireDualStack ClusterIP service: 10.0.0.9 and 2000::9.
func storedDual(tw ...tweak) *Spec {
	return stored(append([]tweak{ips("10.0.0.9", "2000::9"), fams(IPv4, IPv6), policy(RequireDualStack)}, tw...)...)
}

// The singular clusterIP, as kube-apiserver's patchAllocatedValues,
// normalizeClusterIPs and validation treat it.
func TestSingularClusterIP(t *testing.T) {
	v4v6 := []Family{IPv4, IPv6}
	keep0, keep1 := "spec.clusterIPs[0]/IPv4 keep:10.0.0.9", "spec.clusterIPs[1]/IPv6 keep:2000::9"
	runPlanCases(t, []planCase{{
		name: "create: the singular alone is clusterIPs[0]",
		spec: svc(singular("10.0.0.7")), needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.7"},
	}, {
		name: "create: singular and plural agree",
		spec: svc(singular("10.0.0.7"), ips("10.0.0.7")), needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.7"},
	}, {
		name: "create: singular and plural disagree",
		spec: svc(singular("10.0.0.7"), ips("10.0.0.8")),
		err:  `spec.clusterIPs: Invalid value: ["10.0.0.8"]: element [0] must match clusterIP`,
	}, {
		name: "update of a dual-stack service naming only the stored primary keeps both IPs",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.9")),
		needs: []string{keep0, keep1}, families: v4v6, policy: RequireDualStack,
	}, {
		name: "the same with the policy restated",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.9"), policy(RequireDualStack)),
		needs: []string{keep0, keep1}, families: v4v6,
	}, {
		name: "the same on a PreferDualStack service",
		net:  v4v6, stored: storedDual(policy(PreferDualStack)), spec: svc(singular("10.0.0.9")),
		needs: []string{keep0, keep1}, families: v4v6, policy: PreferDualStack,
	}, {
		name: "the singular with SingleStack downgrades, keeping the primary",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.9"), policy(SingleStack)),
		needs: []string{keep0}, release: []string{"ClusterIP/IPv6 2000::9"}, families: []Family{IPv4},
	}, {
		name: "an explicit one-element clusterIPs still needs SingleStack to drop the secondary",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.9"), ips("10.0.0.9")),
		err: `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": must be 'SingleStack' to release the secondary cluster IP`,
	}, {
		name: "a changed singular is a changed primary",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.10")),
		err: `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": must be 'SingleStack' to release the secondary cluster IP`,
	}, {
		name:   "a changed singular on a single-stack service",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)), spec: svc(singular("10.0.0.10")),
		err: `spec.clusterIPs[0]: Invalid value: ["10.0.0.10"]: may not change once set`,
	}, {
		name: "a new uid replaces: the singular is a create's",
		net:  v4v6, stored: storedDual(), spec: svc(singular("10.0.0.9"), uid("uid-2")),
		needs: []string{keep0}, release: []string{"ClusterIP/IPv6 2000::9"}, families: []Family{IPv4}, policy: SingleStack,
	}, {
		name: "to ExternalName, the singular naming the stored primary: every IP released",
		net:  v4v6, stored: storedDual(), spec: svc(typ(TypeExternalName), singular("10.0.0.9"), ports()),
		release: []string{"ClusterIP/IPv4 10.0.0.9", "ClusterIP/IPv6 2000::9"},
	}, {
		name:   "from ExternalName the singular is a create's",
		stored: stored(typ(TypeExternalName), ports()), spec: svc(singular("10.0.0.7")),
		needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.7"},
	}, {
		name:   "headless: None alone keeps None",
		stored: stored(ips(ClusterIPNone), fams(IPv4), policy(SingleStack)), spec: svc(singular(ClusterIPNone)),
		needs: nil,
	}})
}

// TestSingularNeverStored: the completed Spec of a write holds no
// singular clusterIP, and FoldClusterIP folds a create's.
func TestSingularNeverStored(t *testing.T) {
	n := network(t, IPv4, IPv6)
	p, err := PlanWrite(n, storedDual(), svc(singular("10.0.0.9")))
	if err != nil {
		t.Fatal(err)
	}
	done, err := Complete(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.ClusterIP != "" || !slices.Equal(done.ClusterIPs, []string{"10.0.0.9", "2000::9"}) {
		t.Fatalf("completed: clusterIP %q, clusterIPs %v", done.ClusterIP, done.ClusterIPs)
	}

	s := svc(singular("10.0.0.7"))
	if err := FoldClusterIP(&s); err != nil || s.ClusterIP != "" || !slices.Equal(s.ClusterIPs, []string{"10.0.0.7"}) {
		t.Fatalf("FoldClusterIP: %v, clusterIP %q, clusterIPs %v", err, s.ClusterIP, s.ClusterIPs)
	}
	bad := svc(singular("10.0.0.7"), ips("10.0.0.8"))
	if err := FoldClusterIP(&bad); err == nil {
		t.Fatal("FoldClusterIP accepted a singular that disagrees with clusterIPs[0]")
	}
}
