package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/rangealloc/rangealloc/allocator"
)

// PlanWrite plans a create (stored nil) or an update (stored is the record
// Complete returned for the service) of spec on network n. A spec whose UID
// is set and differs from the stored one replaces the service: it is planned
// as a create, and every stored value it does not name again is released.
//
// A rejected write returns Errors. A network that cannot serve services
// (no family, more than two, a family without its range) returns a plain
// error.
func PlanWrite(n Network, stored *Spec, spec Spec) (Plan, error) {
	if err := checkNetwork(n); err != nil {
		return Plan{}, err
	}
	svc := clone(spec)
	defaults(&svc)
	if el := validateEnums(&svc); len(el) > 0 {
		return Plan{}, el
	}
	var old *Spec
	if stored != nil {
		o := clone(*stored)
		defaults(&o)
		old = &o
	}
	replace := old != nil && svc.UID != "" && old.UID != "" && svc.UID != old.UID
	before := old // the service this write updates, nil for a create
	if replace {
		before = nil
	}
	if el := foldClusterIP(&svc, before); len(el) > 0 {
		return Plan{}, el
	}
	if before != nil {
		patchAllocatedValues(&svc, before)
	}
	dropTypeDependent(&svc, before)
	if el := validateTypeFields(&svc); len(el) > 0 {
		return Plan{}, el
	}

	p := planner{n: n, svc: &svc, old: before}
	if old != nil {
		p.held = heldValues(*old)
	}
	if err := p.clusterIPs(); err != nil {
		return Plan{}, err
	}
	if err := p.nodePorts(); err != nil {
		return Plan{}, err
	}
	if err := p.healthCheck(); err != nil {
		return Plan{}, err
	}

	plan := Plan{Spec: svc, Needs: p.needs}
	if old != nil {
		// Release every stored value no Need keeps. This covers type
		// changes, removed ports, downgrades and replacements alike.
		kept := map[Held]bool{}
		for _, nd := range p.needs {
			if nd.Keep {
				kept[poolKey(nd.Kind, nd.Family, nd.Value)] = true
			}
		}
		for _, h := range p.held {
			if !kept[poolKey(h.Kind, h.Family, h.Value)] {
				plan.Release = append(plan.Release, h)
			}
		}
	}
	return plan, nil
}

// PlanDelete returns the values a stored record holds, all to be released,
// in the order of Plan.Release.
func PlanDelete(stored Spec) []Held {
	s := clone(stored)
	defaults(&s)
	return heldValues(s)
}

// Complete fills the dynamic picks into p.Spec, one per Plan.Dynamic() Need
// in that order, and returns the record to store.
func Complete(p Plan, picked []string) (Spec, error) {
	dyn := p.Dynamic()
	if len(picked) != len(dyn) {
		return Spec{}, fmt.Errorf("service: %d dynamic values needed, %d picked", len(dyn), len(picked))
	}
	s := clone(p.Spec)
	for i, nd := range dyn {
		v := picked[i]
		if v == "" {
			return Spec{}, fmt.Errorf("service: empty pick for %s", nd.Field)
		}
		switch nd.Kind {
		case KindClusterIP:
			if nd.Index < 0 || nd.Index >= len(s.ClusterIPs) {
				return Spec{}, fmt.Errorf("service: %s: no such clusterIPs index", nd.Field)
			}
			s.ClusterIPs[nd.Index] = v
		case KindNodePort, KindHealthCheckNodePort:
			port, err := strconv.ParseInt(v, 10, 32)
			if err != nil || port <= 0 {
				return Spec{}, fmt.Errorf("service: %s: %q is not a port", nd.Field, v)
			}
			if nd.Kind == KindHealthCheckNodePort {
				s.HealthCheckNodePort = int32(port)
				continue
			}
			for _, i := range nd.Ports {
				if i < 0 || i >= len(s.Ports) {
					return Spec{}, fmt.Errorf("service: %s: no such port index %d", nd.Field, i)
				}
				s.Ports[i].NodePort = int32(port)
			}
		}
	}
	return s, nil
}

func checkNetwork(n Network) error {
	if len(n.Families) == 0 || len(n.Families) > 2 {
		return fmt.Errorf("service: network has %d IP families, want 1 or 2", len(n.Families))
	}
	if len(n.Families) == 2 && n.Families[0] == n.Families[1] {
		return errors.New("service: network lists one IP family twice")
	}
	for _, f := range n.Families {
		r := n.IPRanges[f]
		if r == nil || Family(r.Family()) != f {
			return fmt.Errorf("service: network has no %s range", f)
		}
	}
	return nil
}

func clone(s Spec) Spec {
	s.ClusterIPs = slices.Clone(s.ClusterIPs)
	s.IPFamilies = slices.Clone(s.IPFamilies)
	s.Ports = slices.Clone(s.Ports)
	if s.HasSelector != nil {
		v := *s.HasSelector
		s.HasSelector = &v
	}
	if s.AllocateLoadBalancerNodePorts != nil {
		v := *s.AllocateLoadBalancerNodePorts
		s.AllocateLoadBalancerNodePorts = &v
	}
	return s
}

// defaults applies Kubernetes' static defaults (SetDefaults_Service).
func defaults(s *Spec) {
	if s.Type == "" {
		s.Type = TypeClusterIP
	}
	if s.HasSelector == nil {
		t := true
		s.HasSelector = &t
	}
	for i := range s.Ports {
		if s.Ports[i].Protocol == "" {
			s.Ports[i].Protocol = ProtocolTCP
		}
	}
	if externallyAccessible(s) && s.ExternalTrafficPolicy == "" {
		s.ExternalTrafficPolicy = TrafficCluster
	}
	if s.Type == TypeLoadBalancer && s.AllocateLoadBalancerNodePorts == nil {
		t := true
		s.AllocateLoadBalancerNodePorts = &t
	}
}

func externallyAccessible(s *Spec) bool {
	return s.Type == TypeNodePort || s.Type == TypeLoadBalancer
}

func needsClusterIP(s *Spec) bool { return s.Type != TypeExternalName }
func needsNodePort(s *Spec) bool  { return externallyAccessible(s) }
func needsHealthCheck(s *Spec) bool {
	return s.Type == TypeLoadBalancer && s.ExternalTrafficPolicy == TrafficLocal
}
func headless(s *Spec) bool { return len(s.ClusterIPs) > 0 && s.ClusterIPs[0] == ClusterIPNone }

func shouldAllocateNodePorts(s *Spec) bool {
	switch s.Type {
	case TypeNodePort:
		return true
	case TypeLoadBalancer:
		return s.AllocateLoadBalancerNodePorts == nil || *s.AllocateLoadBalancerNodePorts
	}
	return false
}

func validateEnums(s *Spec) Errors {
	var el Errors
	switch s.Type {
	case TypeClusterIP, TypeNodePort, TypeLoadBalancer, TypeExternalName:
	default:
		el = append(el, notSupported("spec.type", s.Type, TypeClusterIP, TypeExternalName, TypeLoadBalancer, TypeNodePort))
	}
	for i, p := range s.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		switch p.Protocol {
		case ProtocolTCP, ProtocolUDP, ProtocolSCTP:
		default:
			el = append(el, notSupported(f+".protocol", p.Protocol, ProtocolSCTP, ProtocolTCP, ProtocolUDP))
		}
		if p.Port < 1 || p.Port > 65535 {
			el = append(el, invalid(f+".port", p.Port, "must be between 1 and 65535, inclusive"))
		}
		if p.NodePort < 0 || p.NodePort > 65535 {
			el = append(el, invalid(f+".nodePort", p.NodePort, "must be between 1 and 65535, inclusive"))
		}
	}
	switch s.ExternalTrafficPolicy {
	case "", TrafficCluster, TrafficLocal:
	default:
		el = append(el, notSupported("spec.externalTrafficPolicy", s.ExternalTrafficPolicy, TrafficCluster, TrafficLocal))
	}
	if s.HealthCheckNodePort < 0 || s.HealthCheckNodePort > 65535 {
		el = append(el, invalid("spec.healthCheckNodePort", s.HealthCheckNodePort, "must be between 1 and 65535, inclusive"))
	}
	return el
}

// FoldClusterIP folds a create's singular clusterIP into clusterIPs, as
// kube-apiserver does for a Service with no stored object: it stands for
// clusterIPs[0] when clusterIPs is left out, and must match it when not.
// An update is folded by PlanWrite against the stored service instead.
func FoldClusterIP(s *Spec) error {
	if el := foldClusterIP(s, nil); len(el) > 0 {
		return el
	}
	return nil
}

// foldClusterIP moves the singular clusterIP into clusterIPs. On an update
// (old set) that leaves clusterIPs out and names the stored primary, the
// write keeps every stored clusterIP, whatever the types, as
// kube-apiserver's normalizeClusterIPs does: a client that knows only the
// singular field does not drop a dual-stack service's secondary, and a
// change to ExternalName then drops them all (dropTypeDependent).
// Otherwise it stands for a one-element clusterIPs, which the checks that
// follow judge (a changed primary is immutable).
func foldClusterIP(s, old *Spec) Errors {
	ip := s.ClusterIP
	if ip == "" {
		return nil
	}
	s.ClusterIP = ""
	switch {
	case len(s.ClusterIPs) == 0:
		if old != nil && len(old.ClusterIPs) > 0 && old.ClusterIPs[0] == ip {
			s.ClusterIPs = slices.Clone(old.ClusterIPs)
		} else {
			s.ClusterIPs = []string{ip}
		}
	case s.ClusterIPs[0] != ip:
		return Errors{invalid("spec.clusterIPs", s.ClusterIPs, "element [0] must match clusterIP")}
	}
	return nil
}

// patchAllocatedValues fills what an update left out from the stored
// service, as kube-apiserver's patchAllocatedValues does: clusterIPs when
// both need them, nodePorts by port name when both need them (unless the
// old value is named by another port of the update), healthCheckNodePort
// when both need it.
func patchAllocatedValues(s, old *Spec) {
	if needsClusterIP(old) && needsClusterIP(s) && len(s.ClusterIPs) == 0 {
		s.ClusterIPs = slices.Clone(old.ClusterIPs)
	}
	if needsNodePort(old) && needsNodePort(s) {
		inNew := map[int32]bool{}
		for _, p := range s.Ports {
			inNew[p.NodePort] = true
		}
		byName := map[string]int32{}
		for _, p := range old.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range s.Ports {
			if s.Ports[i].NodePort != 0 {
				continue
			}
			if v := byName[s.Ports[i].Name]; v != 0 && !inNew[v] {
				s.Ports[i].NodePort = v
			}
		}
	}
	if needsHealthCheck(old) && needsHealthCheck(s) && s.HealthCheckNodePort == 0 {
		s.HealthCheckNodePort = old.HealthCheckNodePort
	}
}

// dropTypeDependent clears, on an update that changes type, the allocated
// fields the new type does not use when they still hold the stored values,
// as kube-apiserver's dropTypeDependentFields does. What is left is
// validated by validateTypeFields.
func dropTypeDependent(s, old *Spec) {
	if old == nil {
		return
	}
	if s.Type == TypeExternalName && old.Type != TypeExternalName {
		if slices.Equal(s.ClusterIPs, old.ClusterIPs) {
			s.ClusterIPs = nil
		}
		if slices.Equal(s.IPFamilies, old.IPFamilies) {
			s.IPFamilies = nil
		}
		if s.IPFamilyPolicy == old.IPFamilyPolicy {
			s.IPFamilyPolicy = ""
		}
	}
	if !needsNodePort(s) && needsNodePort(old) {
		oldPorts := map[int32]bool{}
		for _, p := range old.Ports {
			oldPorts[p.NodePort] = true
		}
		for i := range s.Ports {
			if oldPorts[s.Ports[i].NodePort] {
				s.Ports[i].NodePort = 0
			}
		}
	}
	if !needsHealthCheck(s) && needsHealthCheck(old) && s.HealthCheckNodePort == old.HealthCheckNodePort {
		s.HealthCheckNodePort = 0
	}
}

// validateTypeFields rejects allocated fields on types that do not use
// them.
func validateTypeFields(s *Spec) Errors {
	var el Errors
	if s.Type == TypeExternalName {
		if len(s.ClusterIPs) > 0 {
			el = append(el, forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
		}
		if s.IPFamilyPolicy != "" {
			el = append(el, forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"))
		}
		if len(s.IPFamilies) > 0 {
			el = append(el, forbidden("spec.ipFamilies", "may not be set for ExternalName services"))
		}
	}
	if !needsNodePort(s) {
		for i, p := range s.Ports {
			if p.NodePort != 0 {
				el = append(el, forbidden(fmt.Sprintf("spec.ports[%d].nodePort", i), fmt.Sprintf("may not be used when `type` is '%s'", s.Type)))
			}
		}
	}
	if s.HealthCheckNodePort != 0 && !needsHealthCheck(s) {
		el = append(el, forbidden("spec.healthCheckNodePort", "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
	}
	if externallyAccessible(s) && headless(s) {
		el = append(el, invalid("spec.clusterIPs[0]", ClusterIPNone, fmt.Sprintf("may not be set to 'None' for %s services", s.Type)))
	}
	return el
}

// heldValues lists a record's values in Release order: clusterIPs, nodePorts
// (each once, by first port), healthCheckNodePort.
func heldValues(s Spec) []Held {
	var out []Held
	seen := map[Held]bool{}
	add := func(h Held) {
		k := poolKey(h.Kind, h.Family, h.Value)
		if !seen[k] {
			seen[k] = true
			out = append(out, h)
		}
	}
	if needsClusterIP(&s) && !headless(&s) {
		for _, ip := range s.ClusterIPs {
			if ip == "" {
				continue
			}
			add(Held{Kind: KindClusterIP, Family: familyOf(ip), Value: ip})
		}
	}
	if needsNodePort(&s) {
		for _, p := range s.Ports {
			if p.NodePort != 0 {
				add(Held{Kind: KindNodePort, Value: itoa(p.NodePort)})
			}
		}
	}
	if needsHealthCheck(&s) && s.HealthCheckNodePort != 0 {
		add(Held{Kind: KindHealthCheckNodePort, Value: itoa(s.HealthCheckNodePort)})
	}
	return out
}

// poolKey identifies a value within its pool: node ports and health-check
// ports share one pool.
func poolKey(k NeedKind, f Family, v string) Held {
	if k == KindHealthCheckNodePort {
		k = KindNodePort
	}
	return Held{Kind: k, Family: f, Value: v}
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }

func familyOf(ip string) Family {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

// planner collects the Needs of one write.
type planner struct {
	n     Network
	svc   *Spec
	old   *Spec // nil on create and replacement
	held  []Held
	needs []Need
}

func (p *planner) isHeld(k NeedKind, f Family, v string) bool {
	key := poolKey(k, f, v)
	for _, h := range p.held {
		if poolKey(h.Kind, h.Family, h.Value) == key {
			return true
		}
	}
	return false
}

func (p *planner) need(nd Need) {
	if nd.Value != "" {
		nd.Keep = p.isHeld(nd.Kind, nd.Family, nd.Value)
	}
	p.needs = append(p.needs, nd)
}

// checkInRange returns the range's error for value, or nil.
func checkInRange(r allocator.Range, v string) error {
	if r == nil {
		return errors.New("no range configured")
	}
	_, err := r.Offset(v)
	return err
}
